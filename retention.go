package rheo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Retention bounds a stream's log. Each rule names events that may go; an
// event is removed when any rule says so, but never while a group still
// needs it (see Trim). The zero value keeps everything.
type Retention struct {
	// MaxAge removes, in each partition, the oldest events while their
	// timestamp is older than now-MaxAge (a prefix: an old event behind a
	// newer one waits for it).
	MaxAge time.Duration
	// MaxEvents keeps at most this many events per partition.
	MaxEvents int64
	// Interest removes every event all of the stream's groups have
	// finished (at or below each group's frontier). A stream without
	// groups keeps everything under this rule.
	Interest bool
}

// IsZero reports whether r keeps everything.
func (r Retention) IsZero() bool { return r == Retention{} }

// String renders r as the CLI prints it, e.g. "max-age=1h0m0s,max-events=1000".
func (r Retention) String() string {
	var parts []string
	if r.MaxAge > 0 {
		parts = append(parts, "max-age="+r.MaxAge.String())
	}
	if r.MaxEvents > 0 {
		parts = append(parts, fmt.Sprintf("max-events=%d", r.MaxEvents))
	}
	if r.Interest {
		parts = append(parts, "interest")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

func (r Retention) check(stream string) error {
	if r.MaxAge < 0 {
		return Errorf(ErrInvalidArgument, "stream %q: retention max age %s is negative", stream, r.MaxAge)
	}
	if r.MaxAge > 0 && r.MaxAge < time.Millisecond {
		return Errorf(ErrInvalidArgument, "stream %q: retention max age %s is below 1ms", stream, r.MaxAge)
	}
	if r.MaxEvents < 0 {
		return Errorf(ErrInvalidArgument, "stream %q: retention max events %d is negative", stream, r.MaxEvents)
	}
	return nil
}

// DeleteOptions confirms a deletion.
type DeleteOptions struct {
	// Confirm must be true: a deletion cannot be undone.
	Confirm bool
}

// DeleteGroup removes a group with its cursor, deliveries, leases and dead
// letters. Its outstanding leases can no longer settle. It requires
// opts.Confirm (ErrConfirmRequired).
func (c *Client) DeleteGroup(ctx context.Context, stream, group string, opts DeleteOptions) error {
	if !opts.Confirm {
		return Errorf(ErrConfirmRequired, "deleting group %q of stream %q drops its progress and dead letters; set Confirm", group, stream)
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return err
	}
	err := c.b.DeleteGroup(ctx, stream, group)
	c.limits.Delete([2]string{stream, group})
	return err
}

// DeleteStream removes a stream with its events and every group. It
// requires opts.Confirm (ErrConfirmRequired).
//
// Other clients may still hold the stream's partition count in their cache;
// recreate a deleted stream under a new name, or with the same partition
// count, while they run.
func (c *Client) DeleteStream(ctx context.Context, stream string, opts DeleteOptions) error {
	if !opts.Confirm {
		return Errorf(ErrConfirmRequired, "deleting stream %q drops its events and every group; set Confirm", stream)
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := checkName("stream", stream); err != nil {
		return err
	}
	err := c.b.DeleteStream(ctx, stream)
	c.streams.Delete(stream)
	c.limits.Range(func(k, _ any) bool {
		if k.([2]string)[0] == stream {
			c.limits.Delete(k)
		}
		return true
	})
	return err
}

// SetRetention replaces the stream's retention policy. It removes nothing by
// itself: Trim (or a client made WithRetention) applies it.
func (c *Client) SetRetention(ctx context.Context, stream string, r Retention) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkName("stream", stream); err != nil {
		return err
	}
	if err := r.check(stream); err != nil {
		return err
	}
	return c.b.SetRetention(ctx, stream, r)
}

// TrimOptions configures Trim.
type TrimOptions struct {
	// Rules to apply; when zero, the stream's own policy is used.
	Retention Retention
	// Force removes events even when groups have not finished them. Those
	// groups skip the removed range (see TrimRequest). It requires Confirm.
	Force   bool
	Confirm bool
	// Partitions scopes the trim; empty means all.
	Partitions []int
	// BatchSize bounds the events removed per store call (default 1000,
	// at most MaxLimit).
	BatchSize int
}

// TrimReport says what a Trim did.
type TrimReport struct {
	Stream     string
	Partitions []PartitionTrim
	// Removed, Skipped and DeadLetters sum the partitions'.
	Removed, Skipped, DeadLetters int64
}

// PartitionTrim is one partition's part of a TrimReport.
type PartitionTrim struct {
	Partition int
	// Target is the sequence the rules asked to trim through.
	Target int64
	// TrimmedThrough is the partition's trimmed sequence afterwards; below
	// Target when groups held the trim back.
	TrimmedThrough int64
	Removed        int64
	// Skipped counts removed events groups had not acked (see TrimRequest).
	Skipped int64
	// DeadLetters counts dead letters removed with their events.
	DeadLetters int64
	// HeldBy lists the groups whose frontier is below Target, which kept
	// a non-forced trim from reaching it.
	HeldBy []string
}

// DefaultTrimBatch is the default number of events one trim call removes.
const DefaultTrimBatch = 1000

// Trim removes old events of a stream by its retention policy, or by the
// rules in opts. Without Force it never removes an event a group has not
// finished: a slow group holds the trim back (PartitionTrim.HeldBy). It
// removes in batches of opts.BatchSize, each its own short store
// transaction, so appends and fetches never wait long.
func (c *Client) Trim(ctx context.Context, stream string, opts TrimOptions) (TrimReport, error) {
	if opts.Force && !opts.Confirm {
		return TrimReport{}, Errorf(ErrConfirmRequired, "a forced trim of stream %q removes events groups have not finished; set Confirm", stream)
	}
	if err := c.check(); err != nil {
		return TrimReport{}, err
	}
	if err := checkName("stream", stream); err != nil {
		return TrimReport{}, err
	}
	if err := opts.Retention.check(stream); err != nil {
		return TrimReport{}, err
	}
	batch, err := checkLimit("trim batch", opts.BatchSize, DefaultTrimBatch)
	if err != nil {
		return TrimReport{}, err
	}
	st, err := c.b.Stream(ctx, stream)
	if err != nil {
		return TrimReport{}, err
	}
	rules := opts.Retention
	if rules.IsZero() {
		rules = st.Retention
	}
	if rules.IsZero() {
		return TrimReport{}, Errorf(ErrInvalidArgument, "stream %q has no retention policy and the trim names no rule (give MaxAge, MaxEvents or Interest)", stream)
	}
	parts, err := scope(stream, opts.Partitions, st.Partitions)
	if err != nil {
		return TrimReport{}, err
	}
	fronts, err := c.frontiers(ctx, stream)
	if err != nil {
		return TrimReport{}, err
	}
	targets, err := c.trimTargets(ctx, st, rules, fronts, parts)
	if err != nil {
		return TrimReport{}, err
	}
	rep := TrimReport{Stream: stream}
	for _, p := range parts {
		pt := PartitionTrim{Partition: p, Target: targets[p], TrimmedThrough: trimmedThrough(st, p)}
		for pt.TrimmedThrough < pt.Target {
			res, err := c.b.Trim(ctx, TrimRequest{Stream: stream, Partition: p, Through: pt.Target, Limit: batch, Force: opts.Force})
			if err != nil {
				return rep, err
			}
			pt.Removed += res.Removed
			pt.Skipped += res.Skipped
			pt.DeadLetters += res.DeadLetters
			if res.TrimmedThrough <= pt.TrimmedThrough {
				pt.TrimmedThrough = max(pt.TrimmedThrough, res.TrimmedThrough)
				break // held back, or another trimmer got there first
			}
			pt.TrimmedThrough = res.TrimmedThrough
		}
		if pt.TrimmedThrough < pt.Target {
			for _, g := range fronts.groups {
				if fronts.byGroup[g][p] < pt.Target {
					pt.HeldBy = append(pt.HeldBy, g)
				}
			}
		}
		rep.Removed += pt.Removed
		rep.Skipped += pt.Skipped
		rep.DeadLetters += pt.DeadLetters
		rep.Partitions = append(rep.Partitions, pt)
	}
	return rep, nil
}

// streamFrontiers are the frontiers of a stream's groups, per partition.
type streamFrontiers struct {
	groups  []string
	byGroup map[string][]int64
}

func (c *Client) frontiers(ctx context.Context, stream string) (streamFrontiers, error) {
	groups, err := c.b.ListGroups(ctx, stream)
	if err != nil {
		return streamFrontiers{}, err
	}
	fr := streamFrontiers{byGroup: make(map[string][]int64, len(groups))}
	for _, g := range groups {
		lag, err := c.b.Lag(ctx, stream, g, nil)
		if err != nil {
			if notFound(err) {
				continue // deleted meanwhile
			}
			return streamFrontiers{}, err
		}
		f := make([]int64, len(lag))
		for _, pl := range lag {
			f[pl.Partition] = pl.Frontier
		}
		fr.groups = append(fr.groups, g)
		fr.byGroup[g] = f
	}
	return fr, nil
}

// trimTargets computes, per partition in parts, the sequence the rules ask
// to trim through (never below what is already trimmed, never above the
// high watermark).
func (c *Client) trimTargets(ctx context.Context, st StreamState, r Retention, fr streamFrontiers, parts []int) (map[int]int64, error) {
	out := make(map[int]int64, len(parts))
	now := c.now()
	for _, p := range parts {
		hw, floor := st.HighWatermarks[p], trimmedThrough(st, p)
		t := floor
		if r.MaxEvents > 0 {
			t = max(t, hw-r.MaxEvents)
		}
		if r.Interest && len(fr.groups) > 0 {
			lowest := hw
			for _, g := range fr.groups {
				lowest = min(lowest, fr.byGroup[g][p])
			}
			t = max(t, lowest)
		}
		if r.MaxAge > 0 {
			age, err := c.ageTarget(ctx, st.Name, p, floor, hw, ceilMicro(now.Add(-r.MaxAge)))
			if err != nil {
				return nil, err
			}
			t = max(t, age)
		}
		out[p] = min(t, hw)
	}
	return out, nil
}

// Windows of sequences ageTarget searches: the first, and the largest.
const (
	ageWindowFirst = 10_000
	ageWindowMax   = 1_000_000
)

// ageTarget returns the sequence before the first event of partition p
// past floor whose timestamp is at or after cutoff (hw when none is): the
// prefix MaxAge removes. It searches windows of sequences, growing while
// they hold only old events, so that a store that filters times by
// scanning (Redis) never scans more than a window at once, and narrower
// ones when the store refuses a window as too large to scan.
func (c *Client) ageTarget(ctx context.Context, stream string, p int, floor, hw int64, cutoff time.Time) (int64, error) {
	w, most := int64(ageWindowFirst), int64(ageWindowMax)
	for lo := floor; lo < hw; {
		hi := lo + min(w, hw-lo)
		evs, err := c.b.Query(ctx, QuerySpec{Query: Query{
			Stream: stream, Partitions: []int{p}, From: cutoff,
			AfterSequence: lo, UntilSequence: hi, OrderBy: []Order{Asc(OrderSequence)}, Limit: 1,
		}})
		if errors.Is(err, ErrUnsupported) && w > 1 {
			most = max(w/10, 1)
			w = most
			continue
		}
		if err != nil {
			return 0, err
		}
		if len(evs) > 0 {
			return evs[0].Sequence - 1, nil
		}
		lo, w = hi, min(2*w, most)
	}
	return hw, nil
}

// ceilMicro rounds t up to a whole microsecond, the precision of stored
// times: an event (of a whole microsecond) is at or after the result
// exactly when it is at or after t.
func ceilMicro(t time.Time) time.Time {
	if u := t.Truncate(time.Microsecond); !u.Equal(t) {
		return u.Add(time.Microsecond)
	}
	return t
}

// notFound reports whether err says a stream or group does not exist.
func notFound(err error) bool {
	return errors.Is(err, ErrStreamNotFound) || errors.Is(err, ErrGroupNotFound)
}

// Stream describes a stream: its partitions, retention policy, and per
// partition its high watermark and trimmed sequence. A partition holds
// HighWatermarks[p] - TrimmedThrough[p] events. The partition count it
// reads is the one the client routes keys by from then on (see
// docs/semantics.md on streams created again by another process).
func (c *Client) Stream(ctx context.Context, stream string) (StreamState, error) {
	if err := c.check(); err != nil {
		return StreamState{}, err
	}
	if err := checkName("stream", stream); err != nil {
		return StreamState{}, err
	}
	st, err := c.b.Stream(ctx, stream)
	if err != nil {
		if errors.Is(err, ErrStreamNotFound) {
			c.streams.Delete(stream)
		}
		return StreamState{}, err
	}
	// What the store says now is the partition count keys are routed by.
	c.streams.Store(stream, partitionCountEntry{st.Partitions, c.opts.clock.Now()})
	if len(st.TrimmedThrough) != st.Partitions {
		st.TrimmedThrough = make([]int64, st.Partitions)
	}
	return st, nil
}
