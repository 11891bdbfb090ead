package rheowatermill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rheo-go/rheo"
)

// Subscriber defaults.
const (
	DefaultConsumerGroup = "watermill"
	DefaultCloseTimeout  = 5 * time.Second
)

// ErrSubscriberClosed is returned by Subscribe after Close.
var ErrSubscriberClosed = errors.New("rheowatermill: subscriber closed")

// errStopping is the reason of a message the subscription claimed but never
// handed out because it was stopping: its lease is released (rheo.Release),
// its attempt not counted.
var errStopping = errors.New("rheowatermill: subscription stopped before the message was handed out")

// errNacked is the nack reason of a plain msg.Nack().
var errNacked = errors.New("nacked by the Watermill handler")

// SubscriberConfig configures a Subscriber. Only Client is required.
type SubscriberConfig struct {
	// Client is the rheo client to consume through. The Subscriber borrows
	// it: Close leaves it open.
	Client *rheo.Client
	// ConsumerGroup is the rheo group every subscription of this Subscriber
	// consumes (default "watermill"). Subscribers of one group compete for
	// messages; each group receives every message.
	ConsumerGroup string
	// Group configures the group when Subscribe creates it (MaxAttempts,
	// Start; default: rheo's MaxAttempts, from the beginning). An existing
	// group keeps its configuration.
	Group rheo.GroupConfig
	// Partitions is the partition count of streams the Subscriber creates
	// (default 1).
	Partitions int
	// DoNotCreate makes Subscribe fail with rheo.ErrStreamNotFound or
	// rheo.ErrGroupNotFound instead of creating the stream or the group.
	DoNotCreate bool
	// Concurrency is how many messages a subscription hands out at once
	// before they are acked or nacked (default 1, which keeps the order of
	// each partition while nothing is retried).
	Concurrency int
	// Prefetch is the most leases a subscription holds at once, handed out
	// or waiting; at least Concurrency. By default (0) the subscription
	// sizes it the way rheo's consumer sizes a window whose MaxInflight is
	// 0: it starts at Concurrency and, for handlers that are quick next to
	// a fetch and a settle, grows up to rheo.DefaultMaxInflight(Concurrency)
	// (2,000 for Concurrency up to 200), fetching half of it (at most 500
	// messages) at a time and settling each fetch's messages together;
	// slow handlers keep it near Concurrency. The messages prefetched
	// behind a handler that stalls wait for it: set Prefetch where that
	// latency matters.
	// Prefetched messages that Close hands back unhandled are released:
	// their claims do not count as attempts.
	Prefetch int
	// LeaseDuration is the lease of each message (default the client's).
	// It is renewed every half lease while the message is held, so a
	// handler may take longer.
	LeaseDuration time.Duration
	// NackDelay is how long a nacked message waits before it can be
	// delivered again (default 0: at once).
	NackDelay time.Duration
	// PollInterval is the longest an idle subscription waits between
	// fetches on stores that cannot notify (default rheo's, 200ms).
	PollInterval time.Duration
	// CloseTimeout is how long Close (or the end of Subscribe's context)
	// lets handed-out messages be acked or nacked before it cancels their
	// contexts and nacks them (default 5s).
	CloseTimeout time.Duration
	// ConsumerID names this worker in its leases (default generated).
	ConsumerID string
	// Marshaler maps events back to messages (default DefaultMarshaler{}).
	// An event it cannot map is rejected into the group's dead letters.
	Marshaler Marshaler
}

// Subscriber is a Watermill message.Subscriber over rheo consumer groups.
// Each Subscribe runs a rheo consumer (client.NewConsumer) of the topic's
// stream for the configured group.
//
// rheo runs at most one consumer of a (stream, group) per client at a time:
// a second concurrent Subscribe of the same topic and group through the same
// client fails with rheo.ErrAlreadyRunning. Scale a subscription with
// Concurrency, or give competing subscribers their own clients.
type Subscriber struct {
	cfg SubscriberConfig
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	wg     sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

type subscription struct {
	cancel context.CancelFunc
}

// NewSubscriber checks cfg and returns a Subscriber.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Client == nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "rheowatermill: SubscriberConfig.Client is nil")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Partitions", int64(cfg.Partitions)},
		{"Concurrency", int64(cfg.Concurrency)},
		{"Prefetch", int64(cfg.Prefetch)},
		{"LeaseDuration", int64(cfg.LeaseDuration)},
		{"NackDelay", int64(cfg.NackDelay)},
		{"PollInterval", int64(cfg.PollInterval)},
		{"CloseTimeout", int64(cfg.CloseTimeout)},
	} {
		if f.v < 0 {
			return nil, rheo.Errorf(rheo.ErrInvalidArgument, "rheowatermill: SubscriberConfig.%s is negative (%d)", f.name, f.v)
		}
	}
	if cfg.ConsumerGroup == "" {
		cfg.ConsumerGroup = DefaultConsumerGroup
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Prefetch != 0 && cfg.Prefetch < cfg.Concurrency {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument,
			"rheowatermill: SubscriberConfig.Prefetch %d is below Concurrency %d (it bounds the messages handed out too)",
			cfg.Prefetch, cfg.Concurrency)
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	if cfg.Marshaler == nil {
		cfg.Marshaler = DefaultMarshaler{}
	}
	// Check the rest (names, limits) the way rheo does, once.
	if _, err := cfg.Client.NewConsumer(consumerConfig(cfg, "probe", func(context.Context, rheo.Event) error { return nil })); err != nil {
		return nil, wrapErr(err, "subscriber config")
	}
	return &Subscriber{
		cfg:  cfg,
		log:  cfg.Client.Logger().With("component", "rheowatermill", "group", cfg.ConsumerGroup),
		subs: map[*subscription]struct{}{},
	}, nil
}

func consumerConfig(cfg SubscriberConfig, topic string, h rheo.Handler) rheo.ConsumerConfig {
	return rheo.ConsumerConfig{
		Stream:          topic,
		Group:           cfg.ConsumerGroup,
		Handler:         h,
		Concurrency:     cfg.Concurrency,
		MaxInflight:     cfg.Prefetch,
		LeaseDuration:   cfg.LeaseDuration,
		PollInterval:    cfg.PollInterval,
		ConsumerID:      cfg.ConsumerID,
		ShutdownTimeout: cfg.CloseTimeout,
	}
}

// SubscribeInitialize creates the topic's stream and the group, unless they
// exist (or DoNotCreate is set, when it only checks that they do).
func (s *Subscriber) SubscribeInitialize(topic string) error {
	return s.initialize(context.Background(), topic)
}

func (s *Subscriber) initialize(ctx context.Context, topic string) error {
	c := s.cfg.Client
	if s.cfg.DoNotCreate {
		if _, err := c.GroupInfo(ctx, topic, s.cfg.ConsumerGroup); err != nil {
			return wrapErr(err, "topic %q, group %q", topic, s.cfg.ConsumerGroup)
		}
		return nil
	}
	if err := ensureStream(ctx, c, topic, s.cfg.Partitions); err != nil {
		return err
	}
	err := c.CreateGroup(ctx, topic, s.cfg.ConsumerGroup, s.cfg.Group)
	if err == nil || errors.Is(err, rheo.ErrAlreadyExists) {
		return nil
	}
	return wrapErr(err, "create group %q on stream %q", s.cfg.ConsumerGroup, topic)
}

// Subscribe consumes topic as the Subscriber's group and returns the
// messages. It creates the stream and the group when they are missing
// (unless DoNotCreate). The channel is unbuffered and is closed once ctx
// ends or Close is called and every handed-out message is settled (or, after
// CloseTimeout, nacked).
//
// Each message's Context carries its lease (rheo.LeaseFromContext) and is
// cancelled once the message is settled, when its lease is lost to another
// worker (cause rheo.ErrStaleLease, logged), or when the subscription stops
// and CloseTimeout has passed (cause rheo.ErrConsumerStopped).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := s.initialize(ctx, topic); err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	runCtx, cancel := context.WithCancel(ctx)
	sub := &subscription{cancel: cancel}
	consumer, err := s.cfg.Client.NewConsumer(consumerConfig(s.cfg, topic, s.handler(runCtx, out)))
	if err != nil {
		cancel()
		return nil, wrapErr(err, "subscribe to topic %q", topic)
	}
	key := runKey{c: s.cfg.Client, stream: topic, group: s.cfg.ConsumerGroup}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return nil, ErrSubscriberClosed
	}
	if !claimRun(key) {
		s.mu.Unlock()
		cancel()
		return nil, wrapErr(rheo.ErrAlreadyRunning,
			"topic %q, group %q is already consumed through this rheo client; raise SubscriberConfig.Concurrency or use another client",
			topic, s.cfg.ConsumerGroup)
	}
	s.subs[sub] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		defer close(out)
		if err := consumer.Run(runCtx); err != nil {
			s.log.Error("subscription stopped", "topic", topic, "err", err)
		}
		releaseRun(key)
		cancel()
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()
	return out, nil
}

// handler hands each event out as a Watermill message and maps the
// message's Ack or Nack to the lease's settle.
func (s *Subscriber) handler(runCtx context.Context, out chan<- *message.Message) rheo.Handler {
	return func(ctx context.Context, e rheo.Event) error {
		if runCtx.Err() != nil {
			return rheo.Release(errStopping)
		}
		msg, err := s.cfg.Marshaler.Unmarshal(e)
		if err != nil {
			s.log.Error("cannot unmarshal event; rejecting it", "topic", e.Stream, "event_id", e.ID, "err", err)
			return rheo.Reject(fmt.Errorf("rheowatermill: unmarshal: %w", err))
		}
		d := &delivery{}
		msg.SetContext(context.WithValue(ctx, deliveryKey{}, d))
		select {
		case out <- msg:
		case <-runCtx.Done():
			return rheo.Release(errStopping)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		select {
		case <-msg.Acked():
			return nil
		case <-msg.Nacked():
			return d.result(s.cfg.NackDelay)
		case <-ctx.Done():
			// An Ack that raced with the cancellation still counts.
			select {
			case <-msg.Acked():
				return nil
			case <-msg.Nacked():
				return d.result(0)
			default:
			}
			return context.Cause(ctx)
		}
	}
}

// Close stops every subscription: nothing new is handed out, messages
// already handed out have CloseTimeout to be acked or nacked (their settles
// are sent), the rest are nacked, and every channel is closed. It returns
// once all of that is done. Later Subscribe calls fail.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	for sub := range s.subs {
		sub.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// runKey names a running consumer: rheo allows one per (client, stream,
// group); checking here turns a clash into an error from Subscribe.
type runKey struct {
	c             *rheo.Client
	stream, group string
}

var (
	runsMu sync.Mutex
	runs   = map[runKey]bool{}
)

func claimRun(k runKey) bool {
	runsMu.Lock()
	defer runsMu.Unlock()
	if runs[k] {
		return false
	}
	runs[k] = true
	return true
}

func releaseRun(k runKey) {
	runsMu.Lock()
	delete(runs, k)
	runsMu.Unlock()
}
