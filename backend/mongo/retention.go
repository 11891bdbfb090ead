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
		return rheo.Errorf(rheo.ErrGroupNotFound, "group %q on stream %q", group, stream)
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
	for _, c := range []*mongo.Collection{b.pointers, b.batches} {
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
	ID    string `bson:"_id"`
	Owner string `bson:"o"`
	Until int64  `bson:"u"`
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
		if v > 0 && cur.Owner != owner && cur.Until > now.UnixNano() {
			return false, nil
		}
		if _, err := b.states.InsertOne(ctx, leaseDoc{ID: versionID(base, v+1), Owner: owner, Until: until.UnixNano()}); err != nil {
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

// Trim implements rheo.Backend. Not supported yet by this backend: events
// live in batch documents that may span partitions, and removing a
// partition's prefix without a transaction while honouring the groups'
// frontiers needs its own decision chain.
func (b *Backend) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	if _, err := b.stream(ctx, r.Stream); err != nil {
		return rheo.TrimResult{}, err
	}
	return rheo.TrimResult{}, rheo.Errorf(rheo.ErrUnsupported, "mongo: trimming stream %q is not supported by the MongoDB backend yet; delete the stream to free its space", r.Stream)
}
