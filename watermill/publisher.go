package rheowatermill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rheo-go/rheo"
)

// MetadataPartitionKey is the metadata key whose value the default
// PartitionKey uses as the event's partition key.
const MetadataPartitionKey = "partition_key"

// ErrPublisherClosed is returned by Publish after Close.
var ErrPublisherClosed = errors.New("rheowatermill: publisher closed")

// PublisherConfig configures a Publisher. Only Client is required.
type PublisherConfig struct {
	// Client is the rheo client to append through. The Publisher borrows
	// it: Close leaves it open.
	Client *rheo.Client
	// Partitions is the partition count of streams the Publisher creates
	// on first use (default 1). An existing stream keeps its own count.
	Partitions int
	// DoNotCreateStreams makes Publish fail with rheo.ErrStreamNotFound
	// when the topic's stream does not exist, instead of creating it.
	DoNotCreateStreams bool
	// Marshaler maps messages to events (default DefaultMarshaler{}).
	Marshaler Marshaler
	// PartitionKey returns the event key that routes msg to a partition
	// (rheo hashes it; see rheo.Message.Key). Default: the message's
	// metadata value under MetadataPartitionKey ("" routes to partition 0).
	PartitionKey func(topic string, msg *message.Message) string
}

// Publisher is a Watermill message.Publisher that appends to rheo streams.
// It is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	closed atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher checks cfg and returns a Publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "rheowatermill: PublisherConfig.Client is nil")
	}
	if cfg.Partitions < 0 || cfg.Partitions > rheo.MaxPartitions {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "rheowatermill: PublisherConfig.Partitions %d out of range 0..%d",
			cfg.Partitions, rheo.MaxPartitions)
	}
	if cfg.Marshaler == nil {
		cfg.Marshaler = DefaultMarshaler{}
	}
	if cfg.PartitionKey == nil {
		cfg.PartitionKey = func(_ string, msg *message.Message) string { return msg.Metadata.Get(MetadataPartitionKey) }
	}
	return &Publisher{cfg: cfg}, nil
}

// Publish appends msgs to the stream named topic, atomically (all or
// nothing) for up to rheo.MaxLimit messages, in batches of that size beyond.
// Each message's UUID is its event ID: publishing a message again (a retry
// after an ambiguous error, say) stores nothing new. Two messages of one call
// may not share a UUID.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	buf := publishBuffers.Get().(*publishBuffer)
	defer buf.release()
	ms := buf.messages(len(msgs))
	dm, fast := p.cfg.Marshaler.(DefaultMarshaler)
	var unverified []bool
	if fast {
		unverified = buf.flags(len(msgs))
	}
	for i, msg := range msgs {
		var m rheo.Message
		if fast {
			m, unverified[i] = dm.marshal(msg, false)
		} else {
			var err error
			if m, err = p.cfg.Marshaler.Marshal(topic, msg); err != nil {
				return fmt.Errorf("rheowatermill: marshal message %s for topic %q: %w", msg.UUID, topic, err)
			}
		}
		if m.Key == "" {
			m.Key = p.cfg.PartitionKey(topic, msg)
		}
		ms[i] = m
	}
	// Watermill's Publish takes no context, and a message's own context
	// may be a consumed message's, cancelled once that one is acked.
	ctx := context.Background()
	for start := 0; start < len(ms); start += rheo.MaxLimit {
		end := min(start+rheo.MaxLimit, len(ms))
		err := p.append(ctx, topic, ms[start:end])
		if err != nil && fast && errors.Is(err, rheo.ErrInvalidArgument) &&
			p.wrapRefused(ctx, topic, ms[start:end], unverified[start:end]) {
			// Some payloads looked like JSON objects rheo can store as they
			// are but were not: store them wrapped instead.
			err = p.append(ctx, topic, ms[start:end])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// publishBuffer holds a Publish call's converted messages: AppendBatch
// keeps none of them, so the next call reuses the slices.
type publishBuffer struct {
	ms         []rheo.Message
	unverified []bool
}

var publishBuffers = sync.Pool{New: func() any { return new(publishBuffer) }}

func (b *publishBuffer) messages(n int) []rheo.Message {
	if cap(b.ms) < n {
		b.ms = make([]rheo.Message, n)
	}
	b.ms = b.ms[:n]
	return b.ms
}

func (b *publishBuffer) flags(n int) []bool {
	if cap(b.unverified) < n {
		b.unverified = make([]bool, n)
	}
	b.unverified = b.unverified[:n]
	clear(b.unverified)
	return b.unverified
}

// release drops the buffer's references to the caller's payloads and
// metadata and returns it to the pool (one grown past 1,024 messages is
// not kept).
func (b *publishBuffer) release() {
	clear(b.ms)
	if cap(b.ms) > 1024 {
		return
	}
	publishBuffers.Put(b)
}

// wrapRefused wraps the unverified payloads that rheo refuses to store as
// they are (not JSON, or JSON some store could not keep exactly: rheo's
// PrepareAppend, which stores nothing, is the judge) and reports whether
// there were any.
func (p *Publisher) wrapRefused(ctx context.Context, topic string, ms []rheo.Message, unverified []bool) bool {
	changed := false
	for i := range ms {
		if !unverified[i] {
			continue
		}
		_, err := p.cfg.Client.PrepareAppend(ctx, topic, []rheo.Message{{ID: ms[i].ID, Payload: ms[i].Payload}})
		if errors.Is(err, rheo.ErrInvalidArgument) || !json.Valid(ms[i].Payload) {
			ms[i].Payload = wrapBytes(ms[i].Payload)
			changed = true
		}
	}
	return changed
}

func (p *Publisher) append(ctx context.Context, topic string, ms []rheo.Message) error {
	_, err := p.cfg.Client.AppendBatch(ctx, topic, ms)
	if err == nil || !errors.Is(err, rheo.ErrStreamNotFound) || p.cfg.DoNotCreateStreams {
		return wrapErr(err, "publish to topic %q", topic)
	}
	if err := ensureStream(ctx, p.cfg.Client, topic, p.cfg.Partitions); err != nil {
		return err
	}
	_, err = p.cfg.Client.AppendBatch(ctx, topic, ms)
	return wrapErr(err, "publish to topic %q", topic)
}

// Close makes later Publish calls fail. Publishes already running finish.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}

// ensureStream creates the stream when it does not exist.
func ensureStream(ctx context.Context, c *rheo.Client, stream string, partitions int) error {
	err := c.CreateStream(ctx, stream, rheo.StreamConfig{Partitions: partitions})
	if err == nil || errors.Is(err, rheo.ErrAlreadyExists) {
		return nil
	}
	return wrapErr(err, "create stream %q", stream)
}

func wrapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rheowatermill: %s: %w", fmt.Sprintf(format, args...), err)
}
