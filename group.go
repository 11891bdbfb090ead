package rheo

import (
	"context"
	"errors"
	"time"
)

// GroupConfig configures a new consumer group.
type GroupConfig struct {
	// MaxAttempts is how many claims a delivery gets before a nack (or an
	// expiry at the limit) dead-letters it. Default WithMaxAttempts (5).
	MaxAttempts int
	// Start is where the group begins in Partitions; default Beginning().
	Start Position
	// Partitions scopes Start; empty means all. The group always consumes
	// every partition: those outside Partitions start at the beginning.
	Partitions []int
}

// Position is where a group starts (or restarts) in a partition.
// The zero Position is Beginning().
type Position struct {
	kind positionKind
	seq  int64
	seqs map[int]int64
	at   time.Time
}

type positionKind int

const (
	posBeginning positionKind = iota
	posLatest
	posAfterSequence
	posAfterSequences
	posAtTime
)

// Beginning starts at the first event.
func Beginning() Position { return Position{kind: posBeginning} }

// Latest starts at the high watermark: only events appended later are delivered.
func Latest() Position { return Position{kind: posLatest} }

// AfterSequence starts after sequence s (the group's frontier starts at s).
func AfterSequence(s int64) Position { return Position{kind: posAfterSequence, seq: s} }

// AfterSequences starts each listed partition after its own sequence;
// partitions not listed start at the beginning.
func AfterSequences(m map[int]int64) Position {
	c := make(map[int]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return Position{kind: posAfterSequences, seqs: c}
}

// AtTime starts at the first event whose timestamp is at or after t, or after
// the last event when there is none.
func AtTime(t time.Time) Position { return Position{kind: posAtTime, at: t} }

// ResetOptions configures ResetGroup.
type ResetOptions struct {
	// Confirm must be true: a reset forgets the group's deliveries, leases
	// and dead letters in its partitions.
	Confirm bool
	Start   Position
	// Partitions scopes the reset; empty means all.
	Partitions []int
}

// GroupInfo summarises a group's health.
type GroupInfo struct {
	Stream, Group string
	Lag           Lag
	// Inflight counts leases held, including expired ones nobody reclaimed yet.
	Inflight int64
	// Available counts deliveries claimable now or later: available, delayed,
	// and events not yet offered up to the high watermark.
	Available int64
	// DeadLetters counts the group's dead letters.
	DeadLetters int64
	// MaxAttempts is the group's attempt limit, as created.
	MaxAttempts int
	// OldestPending is the timestamp of the oldest event not terminal for
	// the group; zero when there is none.
	OldestPending time.Time
	// Skipped counts events trims removed before the group acked them
	// (dead letters; with a forced trim, pending and unoffered events).
	Skipped int64
	// HoldsRetention is true when the group's frontier is below what the
	// stream's MaxAge or MaxEvents rules would trim: it is holding the
	// stream's retention back.
	HoldsRetention bool
}

// DeadLetterOptions pages DeadLetters.
type DeadLetterOptions struct {
	// Limit defaults to 100; at most 10,000.
	Limit int
	// After is an event ID (exclusive) from a previous page.
	After string
}

// DeadLetter is an event a group gave up on.
type DeadLetter struct {
	EventID        string
	Partition      int
	Sequence       int64
	Attempts       int
	Reason         string
	DeadLetteredAt time.Time
	Event          Event
}

// CreateGroup creates a consumer group on a stream.
func (c *Client) CreateGroup(ctx context.Context, stream, group string, cfg GroupConfig) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return err
	}
	if cfg.MaxAttempts < 0 {
		return Errorf(ErrInvalidArgument, "group %q: max attempts %d is negative", group, cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = c.opts.maxAttempts
	}
	st, err := c.b.Stream(ctx, stream)
	if err != nil {
		return err
	}
	start, err := c.resolveStart(ctx, st, cfg.Start, cfg.Partitions)
	if err != nil {
		return err
	}
	for p := 0; p < st.Partitions; p++ {
		if _, ok := start[p]; !ok {
			start[p] = trimmedThrough(st, p)
		}
	}
	return c.b.CreateGroup(ctx, GroupSpec{
		Stream: stream, Group: group, MaxAttempts: cfg.MaxAttempts, Start: start, CreatedAt: c.now(),
	})
}

// resolveStart turns a Position into a start sequence for each partition in
// parts (default all).
func (c *Client) resolveStart(ctx context.Context, st StreamState, pos Position, parts []int) (map[int]int64, error) {
	parts, err := scope(st.Name, parts, st.Partitions)
	if err != nil {
		return nil, err
	}
	start := make(map[int]int64, st.Partitions)
	if pos.kind == posAfterSequences {
		for p := range pos.seqs {
			if p < 0 || p >= st.Partitions {
				return nil, Errorf(ErrInvalidPartition, "start position names partition %d of stream %q (it has %d)", p, st.Name, st.Partitions)
			}
		}
	}
	for _, p := range parts {
		hw, floor := st.HighWatermarks[p], trimmedThrough(st, p)
		var s int64
		switch pos.kind {
		case posBeginning:
		case posLatest:
			s = hw
		case posAfterSequence, posAfterSequences:
			s = pos.seq
			if pos.kind == posAfterSequences {
				s = pos.seqs[p]
			}
			if s < 0 {
				return nil, Errorf(ErrInvalidArgument, "start sequence %d of partition %d is negative", s, p)
			}
			if s > hw {
				return nil, Errorf(ErrInvalidArgument, "start sequence %d of partition %d is beyond its high watermark %d", s, p, hw)
			}
		case posAtTime:
			s = hw
			evs, err := c.b.Query(ctx, QuerySpec{Query: Query{
				Stream: st.Name, Partitions: []int{p}, From: normTime(pos.at),
				OrderBy: []Order{Asc(OrderSequence)}, Limit: 1,
			}})
			if err != nil {
				return nil, err
			}
			if len(evs) > 0 {
				s = evs[0].Sequence - 1
			}
		}
		// Starts in a trimmed range begin at the oldest retained event.
		start[p] = max(s, floor)
	}
	return start, nil
}

// ListGroups lists the stream's groups, sorted.
func (c *Client) ListGroups(ctx context.Context, stream string) ([]string, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkName("stream", stream); err != nil {
		return nil, err
	}
	return c.b.ListGroups(ctx, stream)
}

// GroupInfo summarises a group: lag, leases held, available deliveries, dead
// letters and the oldest pending event.
func (c *Client) GroupInfo(ctx context.Context, stream, group string) (GroupInfo, error) {
	return c.groupInfo(ctx, stream, group, &infoShared{})
}

// GroupInfos returns the GroupInfo of each of the stream's groups, in
// order, reading what they share once: the stream's state, its retention
// targets, and the oldest pending event of partitions whose frontiers
// coincide. This is what a scrape of many groups wants. A group that cannot
// be read gets its error in errs[i] and a zero GroupInfo.
func (c *Client) GroupInfos(ctx context.Context, stream string, groups []string) (infos []GroupInfo, errs []error) {
	infos, errs = make([]GroupInfo, len(groups)), make([]error, len(groups))
	sh := &infoShared{}
	for i, g := range groups {
		infos[i], errs[i] = c.groupInfo(ctx, stream, g, sh)
	}
	return infos, errs
}

// infoShared is what GroupInfo reads that the groups of one stream share,
// kept across the groups of one GroupInfos call.
type infoShared struct {
	state    *StreamState
	holds    map[int]int64 // retention targets; nil until read
	holdsSet bool
	oldest   map[[2]int64]time.Time // (partition, sequence) -> timestamp; zero: none
}

func (c *Client) groupInfo(ctx context.Context, stream, group string, sh *infoShared) (GroupInfo, error) {
	lag, err := c.Lag(ctx, stream, group)
	if err != nil {
		return GroupInfo{}, err
	}
	st, err := c.b.GroupStats(ctx, stream, group, c.now())
	if err != nil {
		return GroupInfo{}, err
	}
	info := GroupInfo{Stream: stream, Group: group, Lag: lag,
		Inflight: st.Inflight, Available: st.Available, DeadLetters: st.DeadLetters, Skipped: st.Skipped,
		MaxAttempts: st.MaxAttempts}
	if sh.state == nil {
		state, err := c.b.Stream(ctx, stream)
		if err != nil {
			return GroupInfo{}, err
		}
		sh.state = &state
	}
	state := *sh.state
	if !sh.holdsSet {
		r := state.Retention
		r.Interest = false // interest is defined by the groups: nobody holds it back
		if !r.IsZero() {
			parts, _ := scope(state.Name, nil, state.Partitions)
			if sh.holds, err = c.trimTargets(ctx, state, r, streamFrontiers{}, parts); err != nil {
				return GroupInfo{}, err
			}
		}
		sh.holdsSet = true
	}
	for _, pl := range lag.Partitions {
		if t, ok := sh.holds[pl.Partition]; ok && pl.Frontier < t {
			info.HoldsRetention = true
		}
	}
	for _, pl := range lag.Partitions {
		if pl.Lag == 0 {
			continue
		}
		k := [2]int64{int64(pl.Partition), pl.Frontier}
		ts, ok := sh.oldest[k]
		if !ok {
			evs, err := c.b.Read(ctx, stream, pl.Partition, pl.Frontier, 1)
			if err != nil {
				return GroupInfo{}, err
			}
			if len(evs) > 0 {
				ts = evs[0].Timestamp
			}
			if sh.oldest == nil {
				sh.oldest = map[[2]int64]time.Time{}
			}
			sh.oldest[k] = ts
		}
		if !ts.IsZero() && (info.OldestPending.IsZero() || ts.Before(info.OldestPending)) {
			info.OldestPending = ts
		}
	}
	return info, nil
}

// DeadLetters lists the group's dead letters by (partition, sequence).
func (c *Client) DeadLetters(ctx context.Context, stream, group string, opts DeadLetterOptions) ([]DeadLetter, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return nil, err
	}
	limit, err := checkLimit("dead letters", opts.Limit, 100)
	if err != nil {
		return nil, err
	}
	if opts.After != "" {
		if err := checkName("after event ID", opts.After); err != nil {
			return nil, err
		}
	}
	return c.b.DeadLetters(ctx, stream, group, opts.After, limit)
}

// Redrive makes dead letters available again with attempts reset: the named
// ones, or all of the group's when none are named. It returns how many.
func (c *Client) Redrive(ctx context.Context, stream, group string, eventIDs ...string) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return 0, err
	}
	for _, e := range eventIDs {
		if err := checkName("event ID", e); err != nil {
			return 0, err
		}
	}
	return c.b.Redrive(ctx, stream, group, eventIDs)
}

// ResetGroup forgets everything of the group in its partitions (deliveries,
// leases, dead letters) and restarts them at opts.Start. It requires
// opts.Confirm (ErrConfirmRequired). It returns how many deliveries it
// reopened: the retained events between its new start and its cursor
// (offered to it, or passed over by its earlier start), which it will now
// be offered (a reset to Latest reopens none).
func (c *Client) ResetGroup(ctx context.Context, stream, group string, opts ResetOptions) (int, error) {
	if !opts.Confirm {
		return 0, Errorf(ErrConfirmRequired, "resetting group %q of stream %q forgets its progress; set Confirm", group, stream)
	}
	if err := c.check(); err != nil {
		return 0, err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return 0, err
	}
	st, err := c.b.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	start, err := c.resolveStart(ctx, st, opts.Start, opts.Partitions)
	if err != nil {
		// A missing group is reported before anything about the start, as
		// Replay does (checked only here, off the usual path).
		if _, lerr := c.b.Lag(ctx, stream, group, []int{0}); errors.Is(lerr, ErrGroupNotFound) {
			return 0, lerr
		}
		return 0, err
	}
	return c.b.ResetGroup(ctx, stream, group, start)
}

// trimmedThrough returns partition p's trimmed sequence (0 when the backend
// reported none).
func trimmedThrough(st StreamState, p int) int64 {
	if p < len(st.TrimmedThrough) {
		return st.TrimmedThrough[p]
	}
	return 0
}
