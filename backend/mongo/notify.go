package mongo

import (
	"context"
	"sync"
	"time"
)

// poller wakes the waiters of streams that other processes append to. No
// change streams are used (FerretDB has none, and they need a replica set):
// it reads each watched stream's batch head (two point lookups) every
// interval, which starts at minPoll after a change and doubles up to the
// configured bound while nothing changes. Changes this process makes wake
// waiters at once, without the poller.
type poller struct {
	b *Backend

	mu      sync.Mutex
	streams map[string]int // watched stream -> subscribers
	cancel  context.CancelFunc
	done    chan struct{}
}

const minPoll = 10 * time.Millisecond

func (p *poller) init(b *Backend) {
	p.b = b
	p.streams = map[string]int{}
}

func (p *poller) watch(stream string, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams[stream] += delta
	if p.streams[stream] <= 0 {
		delete(p.streams, stream)
	}
}

func (p *poller) watched() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.streams))
	for s := range p.streams {
		out = append(out, s)
	}
	return out
}

// start runs the poll loop; the hub calls it on its first subscriber.
func (p *poller) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go p.loop(ctx, p.done)
}

// stop ends the poll loop and waits for it; the hub calls it on its last
// unsubscribe.
func (p *poller) stop() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel, p.done = nil, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (p *poller) shutdown() { p.stop() }

func (p *poller) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	last := map[string]int64{}
	interval := minPoll
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed := false
		for _, name := range p.watched() {
			s, err := p.b.stream(ctx, name)
			if err != nil {
				continue
			}
			n, _, err := p.b.batchHead(ctx, s)
			if err != nil {
				continue
			}
			key := s.batchBase()
			if prev, ok := last[key]; ok && n != prev {
				p.b.hub.Signal(name)
				changed = true
			}
			last[key] = n
		}
		if changed {
			interval = minPoll
		} else {
			interval = min(2*interval, p.b.cfg.poll)
		}
		t.Reset(interval)
	}
}
