package rheo

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rheo-go/rheo/internal/id"
	"github.com/rheo-go/rheo/internal/partition"
	"github.com/rheo-go/rheo/internal/payload"
)

// StreamConfig configures a new stream.
type StreamConfig struct {
	// Partitions is the number of partitions, 1 to 1024. Zero means 1.
	Partitions int
	// Retention bounds the stream's log; the zero value keeps everything.
	Retention Retention
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Name       string
	Partitions int
	CreatedAt  time.Time
	// Retention is the stream's retention policy (zero: keep everything).
	Retention Retention
}

// Message is what a producer appends.
type Message struct {
	// ID is the event's identity and idempotency key. When empty a UUIDv7 is
	// generated. Appending an ID that the stream already holds writes nothing
	// and returns the stored event.
	ID string
	// Type and Key are free-form. Key routes the event to a partition
	// (FNV-1a 32 of its UTF-8 bytes, modulo the partition count).
	Type, Key string
	// Partition, when set, places the event explicitly and wins over Key.
	Partition *int
	// Payload must be a JSON object; empty means {}.
	Payload json.RawMessage
	// Metadata carries lineage: correlation_id, causation_id, producer,
	// schema, schema_version and anything else the producer wants. Empty
	// metadata is none: the event's Metadata is nil.
	Metadata map[string]string
	// Timestamp defaults to the client's clock.
	Timestamp time.Time
}

// Event is an immutable, stored event.
type Event struct {
	ID        string
	Stream    string
	Partition int
	// Sequence is per (stream, partition), starts at 1 and is contiguous.
	Sequence  int64
	Type      string
	Key       string
	Timestamp time.Time
	Payload   json.RawMessage
	Metadata  map[string]string
}

// ReadOptions selects a range of one partition for Read.
type ReadOptions struct {
	Partition int
	// After is an exclusive sequence: Read returns events with Sequence > After.
	After int64
	// Limit defaults to 100; at most 10,000.
	Limit int
}

// Metadata keys for lineage, by convention.
const (
	MetaCorrelationID = "correlation_id"
	MetaCausationID   = "causation_id"
	MetaProducer      = "producer"
	MetaSchema        = "schema"
	MetaSchemaVersion = "schema_version"
)

// CreateStream creates a stream; ErrAlreadyExists if the name is taken.
func (c *Client) CreateStream(ctx context.Context, stream string, cfg StreamConfig) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkName("stream", stream); err != nil {
		return err
	}
	n := cfg.Partitions
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxPartitions {
		return Errorf(ErrInvalidArgument, "stream %q: partitions %d out of range 1..%d", stream, cfg.Partitions, MaxPartitions)
	}
	if err := cfg.Retention.check(stream); err != nil {
		return err
	}
	if err := c.b.CreateStream(ctx, StreamInfo{Name: stream, Partitions: n, CreatedAt: c.now(), Retention: cfg.Retention}); err != nil {
		return err
	}
	c.streams.Store(stream, partitionCountEntry{n, c.opts.clock.Now()})
	return nil
}

// ListStreams lists every stream, sorted by name.
func (c *Client) ListStreams(ctx context.Context) ([]StreamInfo, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.b.ListStreams(ctx)
}

// Append appends one event. See AppendBatch.
func (c *Client) Append(ctx context.Context, stream string, m Message) (Event, error) {
	evs, err := c.AppendBatch(ctx, stream, []Message{m})
	if err != nil {
		return Event{}, err
	}
	return evs[0], nil
}

// AppendBatch appends events atomically: all or nothing. Returned events keep
// input order. A message whose ID the stream already holds writes nothing and
// returns the stored event (idempotent producers).
func (c *Client) AppendBatch(ctx context.Context, stream string, ms []Message) (evs []Event, err error) {
	if c.opts.ins != nil {
		var end func(OperationResult)
		ctx, end = c.opts.ins.StartOperation(ctx, Operation{Kind: OpAppend, Stream: stream, Count: len(ms)})
		defer func() { end(OperationResult{Events: evs, Err: err}) }()
	}
	evs, err = c.PrepareAppend(ctx, stream, ms)
	if err != nil || len(evs) == 0 {
		return evs, err
	}
	evs, err = c.b.Append(ctx, stream, evs)
	if errors.Is(err, ErrInvalidPartition) || errors.Is(err, ErrStreamNotFound) {
		// The stream was deleted, maybe created again with fewer
		// partitions, since its count was cached: route again by the
		// count it has now.
		c.streams.Delete(stream)
		if evs, err = c.PrepareAppend(ctx, stream, ms); err != nil || len(evs) == 0 {
			return evs, err
		}
		evs, err = c.b.Append(ctx, stream, evs)
	}
	return evs, err
}

// PrepareAppend validates messages exactly as AppendBatch does and returns
// the events AppendBatch would hand to the backend (IDs generated, partitions
// routed, payloads compacted, timestamps set), without storing anything.
// Backends that append inside a caller's transaction (the transactional
// outbox) use it so that their events are indistinguishable from
// AppendBatch's.
func (c *Client) PrepareAppend(ctx context.Context, stream string, ms []Message) ([]Event, error) {
	evs, cached, err := c.prepareAppend(ctx, stream, ms)
	if cached && errors.Is(err, ErrInvalidPartition) {
		// A message names a partition the cached count lacks: another
		// process may have created the stream again with more.
		c.streams.Delete(stream)
		evs, _, err = c.prepareAppend(ctx, stream, ms)
	}
	return evs, err
}

// prepareAppend is PrepareAppend, and whether the partition count it
// routed and checked by came from the cache.
func (c *Client) prepareAppend(ctx context.Context, stream string, ms []Message) (_ []Event, cached bool, _ error) {
	if err := c.check(); err != nil {
		return nil, false, err
	}
	if err := checkName("stream", stream); err != nil {
		return nil, false, err
	}
	n, cached, err := c.cachedPartitionCount(ctx, stream)
	if err != nil {
		return nil, false, err
	}
	if len(ms) == 0 {
		return []Event{}, cached, nil
	}
	if len(ms) > MaxLimit {
		return nil, cached, Errorf(ErrInvalidArgument, "stream %q: batch of %d messages exceeds %d", stream, len(ms), MaxLimit)
	}
	now := c.now()
	evs := make([]Event, len(ms))
	// One buffer holds every compacted payload of the batch (compaction
	// never grows a payload); each event gets a capacity-limited slice.
	size := 0
	for i := range ms {
		size += max(len(ms[i].Payload), 2)
	}
	arena := make([]byte, 0, size)
	gen := 0
	for i := range ms {
		if ms[i].ID == "" {
			gen++
		}
	}
	// The generated IDs, 36 bytes each in message order: one allocation.
	ids := id.Events(gen)
	var seen map[string]int // caller-chosen IDs; generated ones never collide
	carrier := c.traceCarrier(ctx)
	for i := range ms {
		m := &ms[i]
		if carrier != nil {
			m = injectTrace(m, carrier)
		}
		e := &evs[i]
		if err := c.prepare(e, stream, n, m, now, &arena, &ids); err != nil {
			if len(ms) > 1 {
				return nil, cached, Wrap(ErrInvalidArgument, err, "stream %q: message %d", stream, i)
			}
			return nil, cached, err
		}
		if ms[i].ID != "" && len(ms) > 1 {
			if seen == nil {
				seen = map[string]int{}
			}
			if j, dup := seen[e.ID]; dup {
				return nil, cached, Errorf(ErrInvalidArgument, "stream %q: messages %d and %d share ID %q", stream, j, i, e.ID)
			}
			seen[e.ID] = i
		}
	}
	return evs, cached, nil
}

// prepare fills the zero Event e from m, in place: e is an element of the
// batch's result, and an Event is large to copy.
func (c *Client) prepare(e *Event, stream string, n int, m *Message, now time.Time, arena *[]byte, ids *string) error {
	e.Stream, e.ID, e.Type, e.Key = stream, m.ID, m.Type, m.Key
	if len(m.Metadata) > 0 { // empty metadata is none, on every store
		e.Metadata = m.Metadata
	}
	if e.ID == "" {
		e.ID, *ids = (*ids)[:36], (*ids)[36:]
	} else if err := checkName("event ID", e.ID); err != nil {
		return err
	}
	if err := checkText("type", e.Type); err != nil {
		return err
	}
	if err := checkText("key", e.Key); err != nil {
		return err
	}
	switch {
	case m.Partition != nil:
		if p := *m.Partition; p < 0 || p >= n {
			return Errorf(ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, stream, n)
		}
		e.Partition = *m.Partition
	default:
		e.Partition = partition.Of(e.Key, n)
	}
	size := len(e.ID) + len(e.Type) + len(e.Key)
	for k, v := range e.Metadata {
		if k == "" {
			return Errorf(ErrInvalidArgument, "metadata key is empty")
		}
		if err := checkText("metadata key", k); err != nil {
			return err
		}
		if !utf8.ValidString(v) {
			return Errorf(ErrInvalidArgument, "metadata %q value is not valid UTF-8", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(ErrInvalidArgument, "metadata %q value contains a NUL byte", k)
		}
		size += len(k) + len(v)
	}
	payload, err := compactObject(arena, m.Payload)
	if err != nil {
		return err
	}
	e.Payload = payload
	size += len(payload)
	if size > c.opts.maxEventBytes {
		return Errorf(ErrInvalidArgument, "event %q is %d bytes, over the %d-byte limit", e.ID, size, c.opts.maxEventBytes)
	}
	if m.Timestamp.IsZero() {
		e.Timestamp = now
	} else {
		e.Timestamp = normTime(m.Timestamp)
	}
	return nil
}

// compactObject checks that p is an acceptable payload (see
// internal/payload: a JSON object every store keeps byte for byte) and
// appends it, without insignificant whitespace, to the arena (which must
// have room for p, or 2 bytes when p is empty); it returns the appended
// slice, capacity-limited.
func compactObject(arena *[]byte, p json.RawMessage) (json.RawMessage, error) {
	start := len(*arena)
	if len(p) == 0 {
		*arena = append(*arena, '{', '}')
	} else {
		out, err := payload.Compact(*arena, p)
		if err != nil {
			if strings.HasPrefix(err.Error(), "payload") {
				return nil, Wrap(ErrInvalidArgument, err, "")
			}
			return nil, Wrap(ErrInvalidArgument, err, "payload")
		}
		*arena = out
	}
	return (*arena)[start:len(*arena):len(*arena)], nil
}

// Read returns events of one partition with Sequence > After, ascending.
// It never changes any group's state.
func (c *Client) Read(ctx context.Context, stream string, opts ReadOptions) ([]Event, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkName("stream", stream); err != nil {
		return nil, err
	}
	limit, err := checkLimit("read", opts.Limit, 100)
	if err != nil {
		return nil, err
	}
	if opts.After < 0 {
		return nil, Errorf(ErrInvalidArgument, "read after %d is negative", opts.After)
	}
	_, err = c.checkPartitions(ctx, stream, func(n int) error {
		if opts.Partition < 0 || opts.Partition >= n {
			return Errorf(ErrInvalidPartition, "partition %d of stream %q (it has %d)", opts.Partition, stream, n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c.b.Read(ctx, stream, opts.Partition, opts.After, limit)
}
