package redis

import (
	"context"
	"errors"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
)

// DeleteGroup implements rheo.Backend.
func (b *Backend) DeleteGroup(ctx context.Context, stream, group string) error {
	_, err := b.run(ctx, deleteGroupScript, b.streamBase(stream), group)
	if nf := notFound(err, stream, group); nf != nil {
		return nf
	}
	if err == nil {
		b.forgetRotation(groupBase(b.streamBase(stream), group))
	}
	return b.writeErr(err, "delete group %q of stream %q", group, stream)
}

// DeleteStream implements rheo.Backend. The stream's keys go in one script;
// the registry entry, in another hash slot, right after.
func (b *Backend) DeleteStream(ctx context.Context, stream string) error {
	_, err := b.run(ctx, deleteStreamScript, b.streamBase(stream))
	if nf := notFound(err, stream, ""); nf != nil {
		return nf
	}
	if err != nil {
		return b.writeErr(err, "delete stream %q", stream)
	}
	b.forgetRotation(b.streamBase(stream))
	if err := b.c.HDel(ctx, b.registryKey(), stream).Err(); err != nil {
		return b.writeErr(err, "delete stream %q: registry", stream)
	}
	if err := b.cleanIDs(ctx, b.streamBase(stream)); err != nil {
		return b.writeErr(err, "stream %q is deleted, but removing its ID index stopped (a CreateStream of the name finishes it)", stream)
	}
	return nil
}

// cleanIDs unlinks the buckets of the ID index a deleted stream left (see
// idCleanScript), a thousand per call, so that no call holds the server
// long.
func (b *Backend) cleanIDs(ctx context.Context, base string) error {
	for {
		v, err := b.run(ctx, idCleanScript, base, 1000)
		if err != nil {
			return err
		}
		if n, _ := toInt(v); n == 0 {
			return nil
		}
	}
}

// SetRetention implements rheo.Backend.
func (b *Backend) SetRetention(ctx context.Context, stream string, r rheo.Retention) error {
	_, err := b.run(ctx, setRetentionScript, b.streamBase(stream), int64(r.MaxAge), r.MaxEvents, boolArg(r.Interest))
	if nf := notFound(err, stream, ""); nf != nil {
		return nf
	}
	return b.writeErr(err, "set retention of stream %q", stream)
}

func boolArg(v bool) int {
	if v {
		return 1
	}
	return 0
}

// LeaseRetention implements rheo.Backend.
func (b *Backend) LeaseRetention(ctx context.Context, stream, owner string, now, until time.Time) (bool, error) {
	v, err := b.run(ctx, leaseRetentionScript, b.streamBase(stream), owner, micros(now), micros(until))
	if nf := notFound(err, stream, ""); nf != nil {
		return false, nf
	}
	if err != nil {
		return false, b.writeErr(err, "retention lease of stream %q", stream)
	}
	n, _ := toInt(v)
	return n == 1, nil
}

// Trim implements rheo.Backend.
func (b *Backend) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	force := 0
	if r.Force {
		force = 1
	}
	v, err := b.run(ctx, trimScript, b.streamBase(r.Stream), r.Partition, r.Through, r.Limit, force)
	if nf := notFound(err, r.Stream, ""); nf != nil {
		return rheo.TrimResult{}, nf
	}
	if err != nil {
		return rheo.TrimResult{}, b.writeErr(err, "trim stream %q partition %d", r.Stream, r.Partition)
	}
	row, _ := v.([]any)
	var out [4]int64
	for i := range out {
		if i < len(row) {
			out[i], _ = toInt(row[i])
		}
	}
	return rheo.TrimResult{Removed: out[0], TrimmedThrough: out[1], Skipped: out[2], DeadLetters: out[3]}, nil
}

// retentionState reads a stream's retention policy and trimmed sequences
// into st (whose Partitions is set).
func (b *Backend) retentionState(ctx context.Context, st *rheo.StreamState) error {
	v, err := b.run(ctx, retentionStateScript, b.streamBase(st.Name))
	if nf := notFound(err, st.Name, ""); nf != nil {
		return nf
	}
	if err != nil {
		return b.readErr(err, "stream %q", st.Name)
	}
	row := v.([]any)
	age, _ := toInt(row[0])
	maxEvents, _ := toInt(row[1])
	interest, _ := toInt(row[2])
	st.Retention = rheo.Retention{MaxAge: time.Duration(age), MaxEvents: maxEvents, Interest: interest != 0}
	st.TrimmedThrough = make([]int64, st.Partitions)
	for p, th := range flatMap(row[3]) {
		i, err := strconv.Atoi(p)
		if err == nil && i >= 0 && i < st.Partitions {
			st.TrimmedThrough[i], _ = strconv.ParseInt(th, 10, 64)
		}
	}
	return nil
}

// groupSkipped reads a group's Skipped count.
func (b *Backend) groupSkipped(ctx context.Context, stream, group string) (int64, error) {
	n, err := b.c.Get(ctx, groupBase(b.streamBase(stream), group)+"sk").Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	return n, err
}
