package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
)

// Error codes the scripts reply with.
const (
	codeNoStream = "RHEO_NOSTREAM"
	codeNoGroup  = "RHEO_NOGROUP"
	codeExists   = "RHEO_EXISTS"
	codeNoCursor = "RHEO_NOCURSOR"
	codeNoPart   = "RHEO_NOPARTITION"
	codeIDsGone  = "RHEO_IDGONE" // a deleted stream's ID index is still being removed
)

// scriptCode returns the rheo error code of a script's error reply, if any.
func scriptCode(err error) string {
	var re goredis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, c := range []string{codeNoStream, codeNoGroup, codeExists, codeNoCursor, codeNoPart, codeIDsGone} {
			if strings.Contains(msg, c) {
				return c
			}
		}
	}
	return ""
}

// notFound maps the scripts' not-found replies (and a partition the stream
// does not have) onto rheo's sentinels.
func notFound(err error, stream, group string) error {
	switch scriptCode(err) {
	case codeNoStream:
		return rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", stream)
	case codeNoGroup:
		return rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", group, stream)
	case codeNoPart:
		return noPartition(err, stream)
	}
	return nil
}

// noPartition maps the append script's RHEO_NOPARTITION p n reply onto
// ErrInvalidPartition.
func noPartition(err error, stream string) error {
	_, after, _ := strings.Cut(err.Error(), codeNoPart)
	if f := strings.Fields(after); len(f) == 2 {
		return rheo.Errorf(rheo.ErrInvalidPartition, "partition %s of stream %q (it has %s)", f[0], stream, f[1])
	}
	return rheo.Errorf(rheo.ErrInvalidPartition, "stream %q: %v", stream, err)
}

// readErr classifies an error of a call that changes nothing: whatever went
// wrong, nothing was written, so the store is simply unavailable.
func (b *Backend) readErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if m := b.misconfigured(err, format, args...); m != nil {
		return m
	}
	return rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: "+format, args...)
}

// writeErr classifies an error of a call that may have changed state. When
// the command surely never reached Redis (no connection, pool exhausted,
// client closed) or Redis refused it before running it, nothing happened:
// ErrBackendUnavailable. Otherwise (a timeout or a broken connection after
// sending, a cancelled context, a script that failed half way) the write
// may have been applied: ErrAmbiguous.
func (b *Backend) writeErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if m := b.misconfigured(err, format, args...); m != nil {
		return m
	}
	msg := "redis: " + fmt.Sprintf(format, args...)
	if notSent(err) || refused(err) {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s", msg)
	}
	return rheo.Wrap(rheo.ErrAmbiguous, err, "%s", msg)
}

// notSent reports errors raised before a command was written.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	if errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "no such host")
}

// refused reports Redis error replies that mean the command was not run.
func refused(err error) bool {
	var re goredis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
		"NOREPLICAS", "OOM", "MOVED", "ASK", "NOSCRIPT", "NOAUTH", "WRONGPASS", "NOPERM", "MISCONF"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// misconfigured classifies the errors no retry can cure: the server refused
// the credentials or the user's permissions, or the DSN asked for TLS and
// the server does not speak it. Nothing was written.
func (b *Backend) misconfigured(err error, format string, args ...any) error {
	msg := "redis: " + fmt.Sprintf(format, args...)
	if b.lastTLS != nil && (errors.Is(err, context.DeadlineExceeded) || notSent(err)) {
		if te := b.lastTLS.Load(); te != nil {
			err = fmt.Errorf("%w (after %w)", err, te)
		}
	}
	var re goredis.Error
	if errors.As(err, &re) {
		switch text := re.Error(); {
		case strings.HasPrefix(text, "WRONGPASS"), strings.HasPrefix(text, "NOAUTH"),
			strings.Contains(text, "AUTH") && strings.Contains(text, "without any password configured"):
			return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: authentication failed: check the user and password in the DSN (redis://user:password@host:port/db)", msg)
		case strings.HasPrefix(text, "NOPERM"):
			return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: the user lacks a permission rheo needs: grant it with ACL SETUSER (see docs/redis.md)", msg)
		case strings.Contains(text, "DB index is out of range"):
			return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: the server has no database of the DSN's number: use one below its `databases` setting (redis://host:port/0 is the default)", msg)
		}
	}
	var te *tlsError
	if errors.As(err, &te) {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) {
			// No TLS reply at all, or a plain-text one: not a TLS server.
			return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: the server does not speak TLS: use redis:// instead of rediss://, or enable TLS on the server", msg)
		}
		return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: check the server's certificate and the DSN's TLS settings", msg)
	}
	return nil
}
