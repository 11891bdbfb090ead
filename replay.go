package rheo

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Replay says which deliveries of a group to reopen. Build one with
// FromSequence, FromTime, Matching or Events.
type Replay struct {
	kind  replayKind
	seq   int64
	at    time.Time
	query Query
	ids   []string
}

type replayKind int

const (
	replayNone replayKind = iota
	replayFromSequence
	replayFromTime
	replayMatching
	replayEvents
)

// FromSequence reopens every delivery above sequence s (in each partition of
// the scope).
func FromSequence(s int64) Replay { return Replay{kind: replayFromSequence, seq: s} }

// FromTime reopens, in each partition, from the first event whose timestamp
// is at or after t. No such event anywhere in scope is ErrNoEventsInRange.
func FromTime(t time.Time) Replay { return Replay{kind: replayFromTime, at: t} }

// Matching reopens exactly the events the query matches (all pages).
// No match is ErrNoEventsInRange.
func Matching(q Query) Replay { return Replay{kind: replayMatching, query: q} }

// Events reopens the named events. An unknown ID is ErrInvalidArgument.
func Events(ids ...string) Replay {
	return Replay{kind: replayEvents, ids: append([]string(nil), ids...)}
}

// replayChunk bounds the events reopened by one backend call of a Matching
// or Events replay.
const replayChunk = 1000

// Replay reopens the group's deliveries in the range `from` names, within
// partitions (default all): acked ones, dead letters and leased ones (whose
// holders' settles become stale), with attempts starting again from 0. It
// rewinds the cursor and lowers the frontier; events and other groups are
// never touched.
//
// It returns how many deliveries it reopened: the retained events of the
// range at or below the group's cursor, offered to it or passed over by
// its start position. Events past the cursor are delivered in their turn
// anyway, and are not counted.
func (c *Client) Replay(ctx context.Context, stream, group string, from Replay, partitions ...int) (reopened int, err error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if c.opts.ins != nil {
		var end func(OperationResult)
		ctx, end = c.opts.ins.StartOperation(ctx, Operation{Kind: OpReplay, Stream: stream, Group: group})
		defer func() { end(OperationResult{Err: err}) }()
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return 0, err
	}
	var parts []int
	_, err = c.checkPartitions(ctx, stream, func(n int) (err error) {
		parts, err = scope(stream, partitions, n)
		return err
	})
	if err != nil {
		return 0, err
	}
	// Report a missing group before anything about the range (a lag read
	// of one partition: the cheapest read that checks the group).
	if _, err := c.b.Lag(ctx, stream, group, parts[:1]); err != nil {
		return 0, err
	}
	req := ReplayRequest{Stream: stream, Group: group}
	switch from.kind {
	case replayFromSequence:
		if from.seq < 0 {
			return 0, Errorf(ErrInvalidArgument, "replay from sequence %d is negative", from.seq)
		}
		st, err := c.b.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		req.FromSequence = make(map[int]int64, len(parts))
		for _, p := range parts {
			// Below a trimmed point, replay starts at the oldest retained event.
			req.FromSequence[p] = max(from.seq, trimmedThrough(st, p))
		}
		return c.b.Replay(ctx, req)
	case replayFromTime:
		req.FromSequence = map[int]int64{}
		for _, p := range parts {
			evs, err := c.b.Query(ctx, QuerySpec{Query: Query{
				Stream: stream, Partitions: []int{p}, From: normTime(from.at),
				OrderBy: []Order{Asc(OrderSequence)}, Limit: 1,
			}})
			if err != nil {
				return 0, err
			}
			if len(evs) > 0 {
				req.FromSequence[p] = evs[0].Sequence - 1
			}
		}
		if len(req.FromSequence) == 0 {
			where := fmt.Sprintf("stream %q", stream)
			if len(partitions) > 0 {
				where = fmt.Sprintf("partitions %v of stream %q", parts, stream)
			}
			return 0, Errorf(ErrNoEventsInRange, "replay of group %q: no event of %s at or after %s", group, where, from.at.Format(time.RFC3339Nano))
		}
		return c.b.Replay(ctx, req)
	case replayMatching:
		return c.replayMatching(ctx, req, from.query, parts)
	case replayEvents:
		return c.replayEvents(ctx, req, from.ids, parts)
	}
	return 0, Errorf(ErrInvalidArgument, "replay of group %q: no range given (use FromSequence, FromTime, Matching or Events)", group)
}

func (c *Client) replayMatching(ctx context.Context, req ReplayRequest, q Query, parts []int) (int, error) {
	if q.Stream == "" {
		q.Stream = req.Stream
	}
	if q.Stream != req.Stream {
		return 0, Errorf(ErrInvalidArgument, "replay of stream %q with a query of stream %q", req.Stream, q.Stream)
	}
	if len(q.Partitions) == 0 {
		q.Partitions = parts
	} else {
		q.Partitions = slices.DeleteFunc(slices.Clone(q.Partitions), func(p int) bool {
			_, in := slices.BinarySearch(parts, p)
			return !in
		})
		if len(q.Partitions) == 0 {
			return 0, Errorf(ErrNoEventsInRange, "replay of group %q: query partitions are outside the replay scope", req.Group)
		}
	}
	if q.Limit == 0 {
		q.Limit = replayChunk
	}
	found, reopened := 0, 0
	var refs []EventRef
	for e, err := range c.QueryAll(ctx, q) {
		if err != nil {
			return 0, err
		}
		found++
		refs = append(refs, EventRef{ID: e.ID, Partition: e.Partition, Sequence: e.Sequence})
		if len(refs) == replayChunk {
			req.Events = refs
			n, err := c.b.Replay(ctx, req)
			reopened += n
			if err != nil {
				return reopened, err
			}
			refs = refs[:0:0]
		}
	}
	if found == 0 {
		return 0, Errorf(ErrNoEventsInRange, "replay of group %q: the query matches no event of stream %q", req.Group, req.Stream)
	}
	if len(refs) == 0 {
		return reopened, nil
	}
	req.Events = refs
	n, err := c.b.Replay(ctx, req)
	return reopened + n, err
}

func (c *Client) replayEvents(ctx context.Context, req ReplayRequest, ids []string, parts []int) (int, error) {
	for _, e := range ids {
		if err := checkName("event ID", e); err != nil {
			return 0, err
		}
	}
	// Resolve every ID before reopening anything: an unknown ID writes
	// nothing. An ID named twice is reopened (and counted) once.
	var refs []EventRef
	seen := make(map[string]bool, len(ids))
	for chunk := range slices.Chunk(ids, replayChunk) {
		evs, err := c.b.Events(ctx, req.Stream, chunk)
		if err != nil {
			return 0, err
		}
		byID := make(map[string]Event, len(evs))
		for _, e := range evs {
			byID[e.ID] = e
		}
		for _, eid := range chunk {
			e, ok := byID[eid]
			if !ok {
				return 0, Errorf(ErrInvalidArgument, "replay of group %q: event %q is not in stream %q", req.Group, eid, req.Stream)
			}
			if _, in := slices.BinarySearch(parts, e.Partition); in && !seen[e.ID] {
				seen[e.ID] = true
				refs = append(refs, EventRef{ID: e.ID, Partition: e.Partition, Sequence: e.Sequence})
			}
		}
	}
	reopened := 0
	for chunk := range slices.Chunk(refs, replayChunk) {
		req.Events = chunk
		n, err := c.b.Replay(ctx, req)
		reopened += n
		if err != nil {
			return reopened, err
		}
	}
	return reopened, nil
}
