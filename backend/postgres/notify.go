package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener holds the backend's one LISTEN connection (whatever the number of
// subscribers) and fans notifications out to the subscribers of each stream.
// Appends, nacks, replays and redrives send pg_notify(channel, stream) in
// their own transaction, so the signal is delivered when, and only if, the
// change commits. The connection is dialled on the first Subscribe, outside
// the pool so that it never holds a pooled connection hostage, and redialled
// with backoff when it drops; every subscriber is signalled after each
// (re)connection, since notifications sent meanwhile were lost.
type listener struct {
	b *Backend

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newListener(b *Backend) *listener {
	return &listener{b: b, subs: map[string]map[chan struct{}]struct{}{}}
}

// Subscribe implements rheo.Notifier.
func (b *Backend) Subscribe(stream string) (<-chan struct{}, func()) {
	return b.lis.subscribe(stream)
}

func (l *listener) subscribe(stream string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	m := l.subs[stream]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		l.subs[stream] = m
	}
	m[ch] = struct{}{}
	if !l.started && !l.stopped {
		l.started = true
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx)
	}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs[stream], ch)
		if len(l.subs[stream]) == 0 {
			delete(l.subs, stream)
		}
		l.mu.Unlock()
	}
}

func (l *listener) stop() {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (l *listener) signal(stream string) {
	l.mu.Lock()
	for ch := range l.subs[stream] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
}

func (l *listener) signalAll() {
	l.mu.Lock()
	for _, m := range l.subs {
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	l.mu.Unlock()
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if err := l.listen(ctx); err == nil || ctx.Err() != nil {
			return
		}
		// Waiters fall back to polling meanwhile; wake them so none sleeps
		// on a signal that cannot come.
		l.signalAll()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// listen dials, listens and dispatches until the connection fails.
func (l *listener) listen(ctx context.Context) error {
	cfg := l.b.pool.Config().ConnConfig
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.b.channel}.Sanitize()); err != nil {
		return err
	}
	l.signalAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.signal(n.Payload)
	}
}
