package redis

import (
	"context"
	"errors"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
)

// WithWaitReplicas makes every write wait until n replicas of the primary
// that ran it have acknowledged it (Redis's WAIT n timeout, sent on the
// same connection right after the write), for at most timeout (0 waits
// forever; avoid it). A write that fewer than n replicas acknowledged in
// time was applied on the primary but may be lost if that primary fails
// over now: it is reported as rheo.ErrAmbiguous, never as success.
//
// WAIT narrows Redis's window of loss, it does not close it: replication
// stays asynchronous, and a failover may still promote a replica that had
// not received a write another replica acknowledged (with several
// replicas), or a manual CLUSTER FAILOVER FORCE/TAKEOVER may skip the
// handshake. See docs/redis.md. n = 0 turns waiting off (the default);
// New refuses a negative n or timeout with rheo.ErrInvalidArgument.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(b *Backend) {
		b.waitReplicas, b.waitTimeout = n, timeout
	}
}

// WaitReplicas returns the replica count and timeout of WithWaitReplicas.
func (b *Backend) WaitReplicas() (int, time.Duration) { return b.waitReplicas, b.waitTimeout }

// writeScripts are the scripts that change state; the others only read
// and never wait for replicas.
var writeScripts = map[*goredis.Script]bool{
	createStreamScript: true, appendScript: true, createGroupScript: true, fetchScript: true, settleScript: true,
	renewScript: true, replayScript: true, redriveScript: true, resetScript: true,
}

// eval runs a script whose first key routes it; with WithWaitReplicas it
// then waits for the replicas of the primary that ran it.
func (b *Backend) eval(ctx context.Context, s *goredis.Script, keys []string, args ...any) (any, error) {
	if b.waitReplicas == 0 || !writeScripts[s] {
		return s.Run(ctx, b.c, keys, args...).Result()
	}
	var v any
	err := b.waitWrite(ctx, keys[0], func(p goredis.Pipeliner, retry bool) func() error {
		var cmd *goredis.Cmd
		if retry {
			cmd = s.Eval(ctx, p, keys, args...)
		} else {
			cmd = s.EvalSha(ctx, p, keys, args...)
		}
		return func() error {
			var err error
			v, err = cmd.Result()
			return err
		}
	})
	return v, err
}

// hset writes one hash field; with WithWaitReplicas it then waits for the
// replicas.
func (b *Backend) hset(ctx context.Context, key, field, value string) error {
	if b.waitReplicas == 0 {
		return b.c.HSet(ctx, key, field, value).Err()
	}
	return b.waitWrite(ctx, key, func(p goredis.Pipeliner, _ bool) func() error {
		cmd := p.HSet(ctx, key, field, value)
		return cmd.Err
	})
}

// waitWrite sends a write (queued by queue, which returns the write's
// result) and WAIT in one pipeline on the primary that owns key, so WAIT
// counts the replicas that received this write. It follows a cluster's
// redirections and reloads scripts a new primary lacks, and reports a
// shortfall of replicas as rheo.ErrAmbiguous.
func (b *Backend) waitWrite(ctx context.Context, key string, queue func(p goredis.Pipeliner, retry bool) func() error) error {
	cc, isCluster := b.c.(*goredis.ClusterClient)
	retry := false
	for attempt := 0; ; attempt++ {
		node := goredis.Cmdable(b.c)
		if isCluster {
			n, err := cc.MasterForKey(ctx, key)
			if err != nil {
				return err
			}
			node = n
		}
		p := node.Pipeline()
		result := queue(p, retry)
		wait := p.Do(ctx, "WAIT", b.waitReplicas, b.waitTimeout.Milliseconds())
		_, _ = p.Exec(ctx)
		err := result()
		if err != nil {
			var re goredis.Error
			redirected := errors.As(err, &re) && (strings.HasPrefix(re.Error(), "MOVED") || strings.HasPrefix(re.Error(), "ASK"))
			noScript := errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
			if (redirected || noScript) && attempt < 3 {
				// Nothing ran: follow the new slot owner, or send the
				// script's source to a primary that has not loaded it.
				if redirected && isCluster {
					cc.ReloadState(ctx)
				}
				retry = retry || noScript
				continue
			}
			return err
		}
		got, err := wait.Int()
		if err != nil {
			return rheo.Wrap(rheo.ErrAmbiguous, err, "redis: the write was applied on the primary; WAIT for %d replicas failed", b.waitReplicas)
		}
		if got < b.waitReplicas {
			return rheo.Errorf(rheo.ErrAmbiguous,
				"redis: the write was applied on the primary but only %d of %d replicas acknowledged it within %s; a failover now may lose it",
				got, b.waitReplicas, b.waitTimeout)
		}
		return nil
	}
}
