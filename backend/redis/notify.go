package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Wake-ups use sharded pub/sub: the append, settle (nack, release), replay,
// redrive and reset scripts SPUBLISH on the stream's channel "<base>wake",
// which carries the stream's hash tag, so on Redis Cluster it is served by
// the node that owns the stream. A subscription is one dedicated connection
// per stream with waiters, shared by every waiter of this backend. Compared
// with a blocking XREAD on the partition streams it also wakes on nacks,
// releases, replays and redrives, never transfers payloads, and needs one
// connection per stream rather than a read loop per partition. A lost
// message (during a reconnect) only delays a waiter until the facade's next
// poll.

// wakeSub is the subscription of one stream.
type wakeSub struct {
	ps   *goredis.PubSub
	mu   sync.Mutex
	subs map[int]chan struct{}
	next int
	once sync.Once
}

func (s *wakeSub) close() { s.once.Do(func() { _ = s.ps.Close() }) }

func (s *wakeSub) signal() {
	s.mu.Lock()
	for _, c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// Subscribe implements rheo.Notifier. When Redis cannot be reached the
// channel never fires and waiters fall back to the facade's polling.
func (b *Backend) Subscribe(stream string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.hubMu.Lock()
	defer b.hubMu.Unlock()
	if b.done {
		return ch, func() {}
	}
	s := b.hub[stream]
	if s == nil {
		s = b.subscribe(stream)
		if s == nil {
			return ch, func() {}
		}
		b.hub[stream] = s
	}
	s.mu.Lock()
	id := s.next
	s.next++
	s.subs[id] = ch
	s.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.hubMu.Lock()
			s.mu.Lock()
			delete(s.subs, id)
			empty := len(s.subs) == 0
			s.mu.Unlock()
			if empty && b.hub[stream] == s {
				delete(b.hub, stream)
				s.close()
			}
			b.hubMu.Unlock()
		})
	}
}

// subscribe opens the stream's subscription and waits until Redis confirms
// it, so that no change made after Subscribe returns goes unnoticed.
func (b *Backend) subscribe(stream string) *wakeSub {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ps := b.c.SSubscribe(ctx, b.streamBase(stream)+"wake")
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil
	}
	s := &wakeSub{ps: ps, subs: map[int]chan struct{}{}}
	msgs := ps.Channel()
	go func() {
		for range msgs {
			s.signal()
		}
	}()
	return s
}
