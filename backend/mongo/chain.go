package mongo

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// key builds a string _id from parts, each prefixed by its length so that no
// two part lists share a key whatever bytes the names hold.
func key(parts ...string) string {
	var sb strings.Builder
	for i, p := range parts {
		if i > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(strconv.Itoa(len(p)))
		sb.WriteByte(':')
		sb.WriteString(p)
	}
	return sb.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// versionID is the _id of version v of the chain whose base key is base.
func versionID(base string, v int64) string { return base + "#" + itoa(v) }

// byID is the filter every hot-path read uses: one string _id, which every
// MongoDB-compatible server answers from the _id index.
func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }

// findByID decodes the document with the given _id into out; found is false
// when there is none.
func findByID(ctx context.Context, c *mongo.Collection, id string, out any) (bool, error) {
	err := c.FindOne(ctx, byID(id)).Decode(out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}

// A chain is a sequence of immutable documents with _ids base#1, base#2, …
// Writing version v+1 is the only way to change what the chain says, and the
// unique _id index lets exactly one writer create it: the exclusive decision
// is that insert. Versions are never deleted, so a writer that read an old
// head can never recreate a version that once existed.

// cachedHead returns the highest version of base this process has seen.
func (b *Backend) cachedHead(base string) int64 {
	b.headMu.Lock()
	defer b.headMu.Unlock()
	return b.headC[base]
}

// sawHead records that version v of base exists, in the process cache and
// (best effort: a lost update only makes the hint older) in the shared hint
// document other processes start their search from.
func (b *Backend) sawHead(ctx context.Context, base string, v int64, persist bool) {
	b.headMu.Lock()
	if v > b.headC[base] {
		b.headC[base] = v
	}
	b.headMu.Unlock()
	// Hints are persisted every hintEvery versions: a process that starts
	// probes at most that many versions more.
	if persist && v%hintEvery == 0 {
		_, _ = b.heads.UpdateOne(ctx, byID(base), bson.D{{Key: "$max", Value: bson.D{{Key: "v", Value: v}}}},
			options.UpdateOne().SetUpsert(true))
	}
}

// hintEvery is how often (in versions) a chain's shared hint is updated.
const hintEvery = 8

// forgetHead drops the cached head of base (after the chain was removed).
func (b *Backend) forgetHead(base string) {
	b.headMu.Lock()
	delete(b.headC, base)
	b.headMu.Unlock()
}

// head finds the last version of chain base in c and decodes it into out
// (left untouched when the chain is empty: version 0). It starts from the
// cached or hinted version and probes forward by _id until a version is
// missing; every probe is a point lookup.
func (b *Backend) head(ctx context.Context, c *mongo.Collection, base string, out any) (int64, error) {
	v := b.cachedHead(base)
	if v == 0 {
		var h struct {
			V int64 `bson:"v"`
		}
		if _, err := findByID(ctx, b.heads, base, &h); err != nil {
			return 0, err
		}
		v = h.V
	}
	var last bson.Raw
	if v > 0 {
		found, err := findByID(ctx, c, versionID(base, v), &last)
		if err != nil {
			return 0, err
		}
		if !found {
			// The hint names a version that does not exist (the chain
			// was removed with its stream or group): start from nothing.
			b.forgetHead(base)
			v, last = 0, nil
		}
	}
	for {
		var probe bson.Raw
		found, err := findByID(ctx, c, versionID(base, v+1), &probe)
		if err != nil {
			return 0, err
		}
		if !found {
			break
		}
		v, last = v+1, probe
	}
	b.sawHead(ctx, base, v, false)
	if last != nil {
		if err := bson.Unmarshal(last, out); err != nil {
			return 0, err
		}
	}
	return v, nil
}
