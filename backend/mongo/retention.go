package mongo

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/rheo-go/rheo"
)

// DeleteGroup implements rheo.Backend. Removing the group's document is the
// decision; its state chains go after it. A group created again under the
// name gets a new token, so the old chains are never read again and its
// leases are stale there.
func (b *Backend) DeleteGroup(ctx context.Context, stream, group string) error {
	_, g, err := b.group(ctx, stream, group)
	if err != nil {
		return err
	}
	res, err := b.groups.DeleteOne(ctx, byID(g.ID))
	if err != nil {
		return writeErr(err, "delete group %q of stream %q", group, stream)
	}
	if res.DeletedCount == 0 {
		return rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", group, stream)
	}
	if _, err := b.states.DeleteMany(ctx, bson.D{{Key: "st", Value: stream}, {Key: "g", Value: group}, {Key: "gt", Value: g.Tok}}); err != nil {
		return writeErr(err, "delete state of group %q of stream %q", group, stream)
	}
	return nil
}

// DeleteStream implements rheo.Backend. Removing the stream's document is
// the decision; its batches, pointers, groups and states go after it (all
// selected by the stream's token, so a stream created again meanwhile keeps
// its own).
func (b *Backend) DeleteStream(ctx context.Context, stream string) error {
	s, err := b.stream(ctx, stream)
	if err != nil {
		return err
	}
	res, err := b.streams.DeleteOne(ctx, byID(stream))
	if err != nil {
		return writeErr(err, "delete stream %q", stream)
	}
	if res.DeletedCount == 0 {
		return rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", stream)
	}
	cur, err := b.groups.Find(ctx, bson.D{{Key: "st", Value: stream}})
	if err != nil {
		return writeErr(err, "delete groups of stream %q", stream)
	}
	var gs []groupDoc
	if err := cur.All(ctx, &gs); err != nil {
		return writeErr(err, "delete groups of stream %q", stream)
	}
	for _, g := range gs {
		if g.StreamTok != s.Tok {
			continue
		}
		if _, err := b.groups.DeleteOne(ctx, byID(g.ID)); err != nil {
			return writeErr(err, "delete group %q of stream %q", g.Group, stream)
		}
		if _, err := b.states.DeleteMany(ctx, bson.D{{Key: "st", Value: stream}, {Key: "g", Value: g.Group}, {Key: "gt", Value: g.Tok}}); err != nil {
			return writeErr(err, "delete state of group %q of stream %q", g.Group, stream)
		}
	}
	for _, c := range []*mongo.Collection{b.pointers, b.batches, b.states} {
		if _, err := c.DeleteMany(ctx, bson.D{{Key: "st", Value: stream}, {Key: "stok", Value: s.Tok}}); err != nil {
			return writeErr(err, "delete events of stream %q", stream)
		}
	}
	return nil
}

// SetRetention implements rheo.Backend. The policy is a plain field of the
// stream's document: concurrent setters race and the last one wins, which
// breaks no rule.
func (b *Backend) SetRetention(ctx context.Context, stream string, r rheo.Retention) error {
	res, err := b.streams.UpdateOne(ctx, byID(stream), bson.D{{Key: "$set", Value: bson.D{
		{Key: "rage", Value: int64(r.MaxAge)}, {Key: "rmax", Value: r.MaxEvents}, {Key: "rint", Value: r.Interest},
	}}})
	if err != nil {
		return writeErr(err, "set retention of stream %q", stream)
	}
	if res.MatchedCount == 0 {
		return rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", stream)
	}
	return nil
}

// leaseDoc is one version of a stream's retention-lease chain.
type leaseDoc struct {
	ID       string `bson:"_id"`
	Stream   string `bson:"st"`
	StreamTk string `bson:"stok"`
	Owner    string `bson:"o"`
	Until    int64  `bson:"u"`
}

// LeaseRetention implements rheo.Backend: taking, renewing or releasing the
// lease is inserting the next version of the stream's lease chain, so two
// clients can never both hold it.
func (b *Backend) LeaseRetention(ctx context.Context, stream, owner string, now, until time.Time) (bool, error) {
	s, err := b.stream(ctx, stream)
	if err != nil {
		return false, err
	}
	base := key("r", s.Name, s.Tok)
	for attempt := 0; ; attempt++ {
		var cur leaseDoc
		v, err := b.head(ctx, b.states, base, &cur)
		if err != nil {
			return false, readErr(err, "retention lease of stream %q", stream)
		}
		if v > 0 && cur.Owner != owner && cur.Until > now.UnixMicro() {
			return false, nil
		}
		if _, err := b.states.InsertOne(ctx, leaseDoc{ID: versionID(base, v+1), Stream: s.Name, StreamTk: s.Tok, Owner: owner, Until: until.UnixMicro()}); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				if err := backoff(ctx, attempt); err != nil {
					return false, readErr(err, "retention lease of stream %q", stream)
				}
				continue
			}
			return false, writeErr(err, "retention lease of stream %q", stream)
		}
		b.sawHead(ctx, base, v+1, true)
		return true, nil
	}
}

// trimDoc is one version of a partition's trim chain.
type trimDoc struct {
	ID       string `bson:"_id"`
	Stream   string `bson:"st"`
	StreamTk string `bson:"stok"`
	Through  int64  `bson:"t"`
}

func trimBase(stream, tok string, p int) string { return key("t", stream, tok, itoa(int64(p))) }

// trimmed returns partition p's trimmed point (0 when never trimmed).
func (b *Backend) trimmed(ctx context.Context, stream, tok string, p int) (int64, error) {
	var d trimDoc
	if _, err := b.head(ctx, b.states, trimBase(stream, tok, p), &d); err != nil {
		return 0, readErr(err, "read trimmed point of stream %q partition %d", stream, p)
	}
	return d.Through, nil
}

// Trim implements rheo.Backend. Raising the partition's trimmed point is the
// insert of the next version of its trim chain. Groups apply it lazily:
// whoever next reads a group's state in the partition drops what lies at or
// below it (see applyTrim), and this call applies it to every group at once
// to report the counts. The events' pointers are removed (so their IDs may
// be appended again); the batch documents that hold them stay until the
// stream is deleted.
//
// The cap at the groups' lowest frontier is read before the insert: a Replay
// or ResetGroup racing a trim may reopen events the trim then removes (they
// count as skipped). With one process enforcing retention (the retention
// lease) this needs a concurrent manual replay.
func (b *Backend) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	s, err := b.stream(ctx, r.Stream)
	if err != nil {
		return rheo.TrimResult{}, err
	}
	if err := checkParts[int](s, []int{r.Partition}, nil); err != nil {
		return rheo.TrimResult{}, err
	}
	n, hw, err := b.batchHead(ctx, s)
	if err != nil {
		return rheo.TrimResult{}, err
	}
	if err := b.materialize(ctx, s, n); err != nil {
		return rheo.TrimResult{}, err
	}
	cur, err := b.groups.Find(ctx, bson.D{{Key: "st", Value: s.Name}})
	if err != nil {
		return rheo.TrimResult{}, readErr(err, "list groups of stream %q", s.Name)
	}
	var all, gs []groupDoc
	if err := cur.All(ctx, &all); err != nil {
		return rheo.TrimResult{}, readErr(err, "list groups of stream %q", s.Name)
	}
	for _, g := range all {
		if g.StreamTok == s.Tok {
			gs = append(gs, g)
		}
	}
	base := trimBase(s.Name, s.Tok, r.Partition)
	for attempt := 0; ; attempt++ {
		var d trimDoc
		v, err := b.head(ctx, b.states, base, &d)
		if err != nil {
			return rheo.TrimResult{}, readErr(err, "read trimmed point of stream %q", s.Name)
		}
		from := d.Through
		through := min(r.Through, hw[r.Partition], from+int64(r.Limit))
		if !r.Force {
			for i := range gs {
				_, st, err := b.state(ctx, &gs[i], r.Partition)
				if err != nil {
					return rheo.TrimResult{}, err
				}
				through = min(through, st.frontier())
			}
		}
		res := rheo.TrimResult{TrimmedThrough: from}
		if through <= from {
			return res, nil
		}
		cache := b.newBatchCache(s)
		evs, err := cache.readRange(ctx, r.Partition, from+1, through)
		if err != nil {
			return rheo.TrimResult{}, err
		}
		if _, err := b.states.InsertOne(ctx, trimDoc{ID: versionID(base, v+1), Stream: s.Name, StreamTk: s.Tok, Through: through}); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				if err := backoff(ctx, attempt); err != nil {
					return rheo.TrimResult{}, readErr(err, "trim stream %q", s.Name)
				}
				continue
			}
			return rheo.TrimResult{}, writeErr(err, "trim stream %q partition %d", s.Name, r.Partition)
		}
		b.sawHead(ctx, base, v+1, true)
		res.Removed, res.TrimmedThrough = through-from, through
		ids := make(bson.A, 0, 2*len(evs))
		for _, e := range evs {
			ids = append(ids, s.seqPointer(r.Partition, e.Sequence), s.idPointer(e.ID))
		}
		if _, err := b.pointers.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
			return res, writeErr(err, "trim stream %q partition %d: remove pointers", s.Name, r.Partition)
		}
		for i := range gs {
			applied, err := b.changeApplied(ctx, &gs[i], r.Partition, func(*pstate) (bool, error) { return false, nil })
			if err != nil {
				return res, err
			}
			res.Skipped += applied.skipped
			res.DeadLetters += applied.dead
		}
		return res, nil
	}
}
