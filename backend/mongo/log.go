package mongo

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/match"
)

// streamDoc describes a stream. Tok is fresh for every creation, and every
// key of the stream's data includes it, so a stream deleted and created again
// never meets the documents of its predecessor.
type streamDoc struct {
	Name       string `bson:"_id"`
	Tok        string `bson:"tok"`
	Partitions int    `bson:"n"`
	CreatedAt  int64  `bson:"ca"`
	MaxAge     int64  `bson:"rage,omitempty"`
	MaxEvents  int64  `bson:"rmax,omitempty"`
	Interest   bool   `bson:"rint,omitempty"`
}

func (s *streamDoc) info() rheo.StreamInfo {
	return rheo.StreamInfo{Name: s.Name, Partitions: s.Partitions, CreatedAt: fromMicros(s.CreatedAt),
		Retention: rheo.Retention{MaxAge: time.Duration(s.MaxAge), MaxEvents: s.MaxEvents, Interest: s.Interest}}
}

func (s *streamDoc) batchBase() string { return key("b", s.Name, s.Tok) }
func (s *streamDoc) matBase() string   { return key("m", s.Name, s.Tok) }
func (s *streamDoc) seqPointer(p int, seq int64) string {
	return key("p", s.Name, s.Tok, itoa(int64(p)), itoa(seq))
}
func (s *streamDoc) idPointer(id string) string { return key("i", s.Name, s.Tok, id) }

// batchDoc is one committed Append: version n of the stream's batch chain.
// It holds the events it appended and the high watermark of every partition
// after it.
type batchDoc struct {
	ID       string  `bson:"_id"`
	Stream   string  `bson:"st"`
	StreamTk string  `bson:"stok"`
	HW       []int64 `bson:"hw"`
	Events   []evDoc `bson:"ev"`
}

type evDoc struct {
	ID        string            `bson:"i"`
	Partition int               `bson:"p"`
	Sequence  int64             `bson:"s"`
	Type      string            `bson:"t,omitempty"`
	Key       string            `bson:"k,omitempty"`
	Timestamp int64             `bson:"ts"`
	Payload   []byte            `bson:"pl"`
	Metadata  map[string]string `bson:"md,omitempty"`
}

// pointerDoc locates an event: which batch holds it.
type pointerDoc struct {
	ID       string `bson:"_id"`
	Stream   string `bson:"st"`
	StreamTk string `bson:"stok"`
	Batch    int64  `bson:"n"`
}

// Times are stored as int64 microseconds since the Unix epoch: every time
// rheo keeps (year 1 to 9999, to the microsecond) fits, where nanoseconds
// would overflow outside 1677-2262.
func toMicros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(n int64) time.Time { return time.UnixMicro(n).UTC() }

func (e *evDoc) event(stream string) rheo.Event {
	var md map[string]string
	if len(e.Metadata) > 0 {
		md = e.Metadata
	}
	pl := e.Payload
	if pl == nil {
		pl = []byte{}
	}
	return rheo.Event{
		ID: e.ID, Stream: stream, Partition: e.Partition, Sequence: e.Sequence,
		Type: e.Type, Key: e.Key, Timestamp: fromMicros(e.Timestamp),
		Payload: pl, Metadata: md,
	}
}

// stream loads a stream's description.
func (b *Backend) stream(ctx context.Context, name string) (*streamDoc, error) {
	var s streamDoc
	found, err := findByID(ctx, b.streams, name, &s)
	if err != nil {
		return nil, readErr(err, "read stream %q", name)
	}
	if !found {
		return nil, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", name)
	}
	return &s, nil
}

// CreateStream implements rheo.Backend: the insert of the stream's document
// decides who created it.
func (b *Backend) CreateStream(ctx context.Context, info rheo.StreamInfo) error {
	doc := streamDoc{Name: info.Name, Tok: newToken(), Partitions: info.Partitions, CreatedAt: toMicros(info.CreatedAt),
		MaxAge: int64(info.Retention.MaxAge), MaxEvents: info.Retention.MaxEvents, Interest: info.Retention.Interest}
	if _, err := b.streams.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return rheo.Errorf(rheo.ErrAlreadyExists, "stream %q", info.Name)
		}
		return writeErr(err, "create stream %q", info.Name)
	}
	return nil
}

// Stream implements rheo.Backend.
func (b *Backend) Stream(ctx context.Context, name string) (rheo.StreamState, error) {
	s, err := b.stream(ctx, name)
	if err != nil {
		return rheo.StreamState{}, err
	}
	_, hw, err := b.batchHead(ctx, s)
	if err != nil {
		return rheo.StreamState{}, err
	}
	tt := make([]int64, s.Partitions)
	for p := range tt {
		if tt[p], err = b.trimmed(ctx, s.Name, s.Tok, p); err != nil {
			return rheo.StreamState{}, err
		}
	}
	return rheo.StreamState{StreamInfo: s.info(), HighWatermarks: hw, TrimmedThrough: tt}, nil
}

// ListStreams implements rheo.Backend. It reads the whole streams collection,
// which holds one small document per stream.
func (b *Backend) ListStreams(ctx context.Context) ([]rheo.StreamInfo, error) {
	cur, err := b.streams.Find(ctx, bson.D{})
	if err != nil {
		return nil, readErr(err, "list streams")
	}
	var docs []streamDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, readErr(err, "list streams")
	}
	out := make([]rheo.StreamInfo, 0, len(docs))
	for i := range docs {
		out = append(out, docs[i].info())
	}
	slices.SortFunc(out, func(a, b rheo.StreamInfo) int { return compareStrings(a.Name, b.Name) })
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// batchHead returns the stream's last batch number and high watermarks.
func (b *Backend) batchHead(ctx context.Context, s *streamDoc) (int64, []int64, error) {
	var d batchDoc
	n, err := b.head(ctx, b.batches, s.batchBase(), &d)
	if err != nil {
		return 0, nil, readErr(err, "read head of stream %q", s.Name)
	}
	hw := make([]int64, s.Partitions)
	copy(hw, d.HW)
	return n, hw, nil
}

// materialize makes sure the pointers of every batch through n exist. The
// pointers of batch k are written only once those of every batch before k
// are, and the shared mark records how far that holds; so a writer that
// crashed after committing its batch leaves work the next caller finishes.
func (b *Backend) materialize(ctx context.Context, s *streamDoc, n int64) error {
	return b.materializeWith(ctx, s, n, nil)
}

// materializeWith is materialize, given batch n's document when the caller
// has it (the writer that just committed it).
func (b *Backend) materializeWith(ctx context.Context, s *streamDoc, n int64, last *batchDoc) error {
	base := s.matBase()
	m := b.cachedHead(base)
	if m >= n {
		return nil
	}
	if last != nil && m == n-1 {
		return b.writePointers(ctx, s, n, last)
	}
	var h struct {
		V int64 `bson:"v"`
	}
	if _, err := findByID(ctx, b.heads, base, &h); err != nil {
		return readErr(err, "read pointer mark of stream %q", s.Name)
	}
	m = max(m, h.V)
	for k := m + 1; k <= n; k++ {
		var d batchDoc
		found, err := findByID(ctx, b.batches, versionID(s.batchBase(), k), &d)
		if err != nil {
			return readErr(err, "read batch %d of stream %q", k, s.Name)
		}
		if !found {
			return rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: batch %d of stream %q is missing", k, s.Name)
		}
		if err := b.writePointers(ctx, s, k, &d); err != nil {
			return err
		}
	}
	return nil
}

// writePointers writes the pointers of batch k, whose predecessors' are all
// written, and records that.
func (b *Backend) writePointers(ctx context.Context, s *streamDoc, k int64, d *batchDoc) error {
	base := s.matBase()
	{
		docs := make([]any, 0, 2*len(d.Events))
		for _, e := range d.Events {
			docs = append(docs,
				pointerDoc{ID: s.seqPointer(e.Partition, e.Sequence), Stream: s.Name, StreamTk: s.Tok, Batch: k},
				pointerDoc{ID: s.idPointer(e.ID), Stream: s.Name, StreamTk: s.Tok, Batch: k})
		}
		if len(docs) > 0 {
			if _, err := b.pointers.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil && !allDuplicates(err) {
				return readErr(err, "write pointers of batch %d of stream %q", k, s.Name)
			}
		}
		b.sawHead(ctx, base, k, true)
	}
	return nil
}

// allDuplicates reports an insert error whose every failure is a duplicate
// key: what was to be written is already there.
func allDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		if bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
			return false
		}
		for _, we := range bwe.WriteErrors {
			if we.Code != 11000 {
				return false
			}
		}
		return true
	}
	return mongo.IsDuplicateKeyError(err)
}

// batchCache loads batch documents once per call.
type batchCache struct {
	b *Backend
	s *streamDoc
	m map[int64]*batchDoc
}

func (b *Backend) newBatchCache(s *streamDoc) *batchCache {
	return &batchCache{b: b, s: s, m: map[int64]*batchDoc{}}
}

func (c *batchCache) get(ctx context.Context, n int64) (*batchDoc, error) {
	if d, ok := c.m[n]; ok {
		return d, nil
	}
	var d batchDoc
	found, err := findByID(ctx, c.b.batches, versionID(c.s.batchBase(), n), &d)
	if err != nil {
		return nil, readErr(err, "read batch %d of stream %q", n, c.s.Name)
	}
	if !found {
		return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: batch %d of stream %q is missing", n, c.s.Name)
	}
	c.m[n] = &d
	return &d, nil
}

// pointer returns the batch a pointer names, found=false when absent.
func (b *Backend) pointer(ctx context.Context, id string) (int64, bool, error) {
	var p pointerDoc
	found, err := findByID(ctx, b.pointers, id, &p)
	if err != nil {
		return 0, false, readErr(err, "read pointer")
	}
	return p.Batch, found, nil
}

// byID returns the stored event with the given ID, if any.
func (c *batchCache) byID(ctx context.Context, id string) (*evDoc, error) {
	n, found, err := c.b.pointer(ctx, c.s.idPointer(id))
	if err != nil || !found {
		return nil, err
	}
	d, err := c.get(ctx, n)
	if err != nil {
		return nil, err
	}
	for i := range d.Events {
		if d.Events[i].ID == id {
			return &d.Events[i], nil
		}
	}
	return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: batch %d of stream %q lacks event %q", n, c.s.Name, id)
}

// readRange returns partition p's events with from <= sequence <= to, all of
// which must exist, ascending: one pointer lookup and one batch read per
// batch the range crosses.
func (c *batchCache) readRange(ctx context.Context, p int, from, to int64) ([]rheo.Event, error) {
	out := make([]rheo.Event, 0, max(to-from+1, 0))
	for s := from; s <= to; {
		n, found, err := c.b.pointer(ctx, c.s.seqPointer(p, s))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: pointer of sequence %d of partition %d of stream %q is missing", s, p, c.s.Name)
		}
		d, err := c.get(ctx, n)
		if err != nil {
			return nil, err
		}
		next := s
		for i := range d.Events {
			e := &d.Events[i]
			if e.Partition == p && e.Sequence >= s && e.Sequence <= to {
				out = append(out, e.event(c.s.Name))
				next = max(next, e.Sequence+1)
			}
		}
		if next == s {
			return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: batch %d of stream %q lacks sequence %d of partition %d", n, c.s.Name, s, p)
		}
		s = next
	}
	return out, nil
}

// Append implements rheo.Backend.
//
// One Append is one document: version N+1 of the stream's batch chain,
// holding every new event with its sequence and the high watermarks after
// it. Its insert is all or nothing, and it can only be created by a writer
// that read version N, so batches commit one after another and every
// sequence is assigned exactly once, in commit order. A writer that loses
// the race (duplicate key) reads the new head and tries again.
func (b *Backend) Append(ctx context.Context, name string, evs []rheo.Event) ([]rheo.Event, error) {
	s, err := b.stream(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if e.Partition < 0 || e.Partition >= s.Partitions {
			return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", e.Partition, name, s.Partitions)
		}
	}
	for attempt := 0; ; attempt++ {
		n, hw, err := b.batchHead(ctx, s)
		if err != nil {
			return nil, err
		}
		// Every batch through n has its pointers, so the ID lookups below
		// see every stored event; batches after n cannot commit before
		// ours, which needs n+1 to be free.
		if err := b.materialize(ctx, s, n); err != nil {
			return nil, err
		}
		cache := b.newBatchCache(s)
		stored, err := b.lookupIDs(ctx, cache, evs)
		if err != nil {
			return nil, err
		}
		out := make([]rheo.Event, len(evs))
		doc := batchDoc{ID: versionID(s.batchBase(), n+1), Stream: name, StreamTk: s.Tok, HW: hw}
		for i, e := range evs {
			if stored[i] != nil {
				out[i] = stored[i].event(name)
				continue
			}
			doc.HW[e.Partition]++
			e.Stream, e.Sequence = name, doc.HW[e.Partition]
			md := e.Metadata
			if len(md) == 0 {
				md = nil
			} else {
				md = cloneMap(md)
			}
			e.Metadata = md
			doc.Events = append(doc.Events, evDoc{
				ID: e.ID, Partition: e.Partition, Sequence: e.Sequence, Type: e.Type, Key: e.Key,
				Timestamp: toMicros(e.Timestamp), Payload: e.Payload, Metadata: md,
			})
			out[i] = e
		}
		if len(doc.Events) == 0 {
			return out, nil
		}
		if _, err := b.batches.InsertOne(ctx, doc); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				if err := backoff(ctx, attempt); err != nil {
					return nil, readErr(err, "append to stream %q", name)
				}
				continue
			}
			return nil, writeErr(err, "append to stream %q", name)
		}
		b.sawHead(ctx, s.batchBase(), n+1, true)
		// The batch is committed; its pointers are a cache any later
		// caller rebuilds, so a failure here does not fail the append.
		_ = b.materializeWith(ctx, s, n+1, &doc)
		b.hub.Signal(name)
		return out, nil
	}
}

// lookupIDs returns, per event, the stored event with its ID (nil when new).
func (b *Backend) lookupIDs(ctx context.Context, cache *batchCache, evs []rheo.Event) ([]*evDoc, error) {
	out := make([]*evDoc, len(evs))
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 8)
	)
	batches := map[int64]bool{}
	ptrs := make([]int64, len(evs))
	found := make([]bool, len(evs))
	for i := range evs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n, ok, err := b.pointer(ctx, cache.s.idPointer(evs[i].ID))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			ptrs[i], found[i] = n, ok
			if ok {
				batches[n] = true
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for i := range evs {
		if !found[i] {
			continue
		}
		d, err := cache.get(ctx, ptrs[i])
		if err != nil {
			return nil, err
		}
		for j := range d.Events {
			if d.Events[j].ID == evs[i].ID {
				out[i] = &d.Events[j]
			}
		}
		if out[i] == nil {
			return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: batch %d of stream %q lacks event %q", ptrs[i], cache.s.Name, evs[i].ID)
		}
		t, err := b.trimmed(ctx, cache.s.Name, cache.s.Tok, out[i].Partition)
		if err != nil {
			return nil, err
		}
		if out[i].Sequence <= t {
			return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "mongo: the pointer of trimmed event %q of stream %q was not removed; trim again", evs[i].ID, cache.s.Name)
		}
	}
	return out, nil
}

// backoff pauses before retrying a lost race, longer after each loss and
// jittered so that racers spread out.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(min(attempt, 8)+1) * 200 * time.Microsecond
	d += time.Duration(rand.Int64N(int64(d)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func cloneMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// readable returns the stream, its high watermarks, and a cache, with every
// committed batch's pointers in place.
func (b *Backend) readable(ctx context.Context, name string) (*streamDoc, []int64, *batchCache, error) {
	s, err := b.stream(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	n, hw, err := b.batchHead(ctx, s)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := b.materialize(ctx, s, n); err != nil {
		return nil, nil, nil, err
	}
	return s, hw, b.newBatchCache(s), nil
}

// Read implements rheo.Backend.
func (b *Backend) Read(ctx context.Context, name string, partition int, after int64, limit int) ([]rheo.Event, error) {
	s, hw, cache, err := b.readable(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := checkParts[int](s, []int{partition}, nil); err != nil {
		return nil, err
	}
	t, err := b.trimmed(ctx, name, s.Tok, partition)
	if err != nil {
		return nil, err
	}
	after = max(after, t)
	if after >= hw[partition] { // (after+limit could overflow)
		return []rheo.Event{}, nil
	}
	return cache.readRange(ctx, partition, after+1, min(after+int64(limit), hw[partition]))
}

// Events implements rheo.Backend: one pointer lookup per ID.
func (b *Backend) Events(ctx context.Context, name string, ids []string) ([]rheo.Event, error) {
	s, _, cache, err := b.readable(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]rheo.Event, 0, len(ids))
	for _, id := range ids {
		e, err := cache.byID(ctx, id)
		if err != nil {
			return nil, err
		}
		if e != nil {
			t, err := b.trimmed(ctx, name, s.Tok, e.Partition)
			if err != nil {
				return nil, err
			}
			if e.Sequence <= t {
				continue
			}
			out = append(out, e.event(name))
		}
	}
	return out, nil
}

// queryChunk is how many events a query reads per step of its scan.
const queryChunk = 512

// Query implements rheo.Backend by scanning the selected partitions within
// their sequence bounds (a stream has no secondary indexes), the way the
// memory backend does.
func (b *Backend) Query(ctx context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	s, hw, cache, err := b.readable(ctx, q.Stream)
	if err == nil {
		err = checkParts[int](s, q.Partitions, nil)
	}
	if err != nil {
		return nil, err
	}
	parts := q.Partitions
	if len(parts) == 0 {
		parts = make([]int, len(hw))
		for p := range parts {
			parts[p] = p
		}
	}
	perPart := math.MaxInt
	desc := false
	if q.OrderBy[0].Field == rheo.OrderSequence {
		perPart, desc = q.Limit, q.OrderBy[0].Desc
	}
	var out []rheo.Event
	for _, p := range parts {
		t, err := b.trimmed(ctx, s.Name, s.Tok, p)
		if err != nil {
			return nil, err
		}
		lo := max(q.AfterSequence, q.After[p], t) // exclusive
		hi := hw[p]                               // inclusive
		if q.UntilSequence > 0 {
			hi = min(hi, q.UntilSequence)
		}
		n := 0
		for done := int64(0); done < hi-lo && n < perPart; {
			var from, to int64
			if desc {
				to = hi - done
				from = max(lo+1, to-queryChunk+1)
			} else {
				from = lo + 1 + done
				to = min(hi, from+queryChunk-1)
			}
			evs, err := cache.readRange(ctx, p, from, to)
			if err != nil {
				return nil, err
			}
			if desc {
				slices.Reverse(evs)
			}
			for i := range evs {
				if n < perPart && match.Event(&evs[i], &q.Query) {
					out = append(out, evs[i])
					n++
				}
			}
			done += to - from + 1
			cache.m = map[int64]*batchDoc{}
		}
	}
	slices.SortFunc(out, func(a, b rheo.Event) int { return match.Compare(&a, &b, q.OrderBy) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []rheo.Event{}
	}
	return out, nil
}
