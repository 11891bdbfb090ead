package rheo

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rheo-go/rheo/internal/id"
)

// retentionLeaseTTL is how long one enforcement pass holds a stream's
// retention lease. A pass that runs longer only lets a second trimmer in,
// which is safe: every trim batch is its own transaction.
const retentionLeaseTTL = time.Minute

// WithRetention makes the client apply every stream's retention policy by
// itself, one pass every interval (see EnforceRetention), until Close.
// Without it a client never removes events on its own. An interval below
// one second is raised to one second.
func WithRetention(interval time.Duration) Option {
	return func(o *options) { o.retentionEvery = max(interval, time.Second) }
}

// retentionRunner is the background loop started by WithRetention.
type retentionRunner struct {
	stop context.CancelFunc
	done sync.WaitGroup
}

func (c *Client) startRetention() {
	c.retentionOwner = "retention-" + id.Token()
	if c.opts.retentionEvery <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &retentionRunner{stop: cancel}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		t := time.NewTicker(c.opts.retentionEvery)
		defer t.Stop()
		for {
			if _, err := c.EnforceRetention(ctx); err != nil && ctx.Err() == nil {
				c.opts.logger.Warn("rheo: retention pass failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	c.retention = r
}

func (c *Client) stopRetention() {
	if c.retention != nil {
		c.retention.stop()
		c.retention.done.Wait()
	}
}

// EnforceRetention applies, once, the retention policy of every stream that
// has one (never forced: slow groups hold it back). For each stream it first
// takes the stream's retention lease in the store, so that at most one
// client, in any process, trims a stream at a time; a stream whose lease
// another client holds is left to it. It returns a report per stream it
// trimmed. A stream that fails does not stop the others: the error returned
// joins every stream's (each names its stream), and only the end of ctx
// ends the pass early.
func (c *Client) EnforceRetention(ctx context.Context) ([]TrimReport, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	streams, err := c.b.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	var out []TrimReport
	var errs []error
	for _, s := range streams {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if s.Retention.IsZero() {
			continue
		}
		rep, err := c.enforce(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rep != nil {
			out = append(out, *rep)
		}
	}
	return out, errors.Join(errs...)
}

// enforce applies stream s's policy under its retention lease: nil when
// another client holds the lease or the stream is gone.
func (c *Client) enforce(ctx context.Context, s StreamInfo) (*TrimReport, error) {
	now := c.now()
	held, err := c.b.LeaseRetention(ctx, s.Name, c.retentionOwner, now, now.Add(retentionLeaseTTL))
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if !held {
		return nil, nil
	}
	// The policy as listed: one changed meanwhile applies next pass.
	rep, err := c.Trim(ctx, s.Name, TrimOptions{Retention: s.Retention})
	// Release even when the pass failed, so another client can retry.
	now = c.now()
	_, rerr := c.b.LeaseRetention(context.WithoutCancel(ctx), s.Name, c.retentionOwner, now, now)
	if err != nil {
		if notFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if rerr != nil && !notFound(rerr) {
		return nil, rerr
	}
	return &rep, nil
}
