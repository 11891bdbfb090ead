// Package notify fans change signals out to the waiters of each stream: the
// subscriber bookkeeping behind the backends' rheo.Notifier.
package notify

import "sync"

// Hub holds the subscribers of each stream. Signals never block: each
// subscriber's channel holds one pending signal, so signals coalesce.
//
// OnFirst and OnLast, when set, run when the hub gains its first subscriber
// and loses its last (a backend starts and stops its watcher there). They run
// before Subscribe or the unsubscribe function returns, serialised with each
// other, and may call Signal.
type Hub struct {
	OnFirst, OnLast func()

	life sync.Mutex // serialises OnFirst/OnLast transitions
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
	n    int
}

// Subscribe implements rheo.Notifier.
func (h *Hub) Subscribe(stream string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.life.Lock()
	defer h.life.Unlock()
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[string]map[chan struct{}]struct{}{}
	}
	m := h.subs[stream]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		h.subs[stream] = m
	}
	m[ch] = struct{}{}
	h.n++
	first := h.n == 1
	h.mu.Unlock()
	if first && h.OnFirst != nil {
		h.OnFirst()
	}
	var once sync.Once
	return ch, func() { once.Do(func() { h.unsubscribe(stream, ch) }) }
}

func (h *Hub) unsubscribe(stream string, ch chan struct{}) {
	h.life.Lock()
	defer h.life.Unlock()
	h.mu.Lock()
	delete(h.subs[stream], ch)
	if len(h.subs[stream]) == 0 {
		delete(h.subs, stream)
	}
	h.n--
	last := h.n == 0
	h.mu.Unlock()
	if last && h.OnLast != nil {
		h.OnLast()
	}
}

// Signal wakes the subscribers of stream.
func (h *Hub) Signal(stream string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[stream] {
		wake(ch)
	}
}

// SignalAll wakes every subscriber (after a watcher lost signals, say).
func (h *Hub) SignalAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.subs {
		for ch := range m {
			wake(ch)
		}
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
