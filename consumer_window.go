package rheo

import (
	"sync"
	"time"
)

// window sizes a consumer's inflight window when MaxInflight is left at 0.
//
// By Little's law the handlers, running Concurrency at a time for h each,
// consume Concurrency/h leases a second; to keep them busy the consumer must
// hold, beyond the running ones, what they consume while a fetch and a
// settle are on the way (a fetch refills the queue; a settle frees the slots
// the next fetch fills). The window is Concurrency plus twice that, so one
// fetch can be in flight while the queue still holds the next round's work.
// It starts at Concurrency (nothing known yet) and stays within
// [Concurrency, MaxInflight].
type window struct {
	concurrency, ceiling int

	mu                     sync.Mutex
	handler, fetch, settle time.Duration // moving averages; 0 until observed
	size                   int
}

func newWindow(concurrency, ceiling int) *window {
	return &window{concurrency: concurrency, ceiling: ceiling, size: min(concurrency, ceiling)}
}

// ewma folds a new sample into a moving average that weighs it 1/8.
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return max(sample, 1)
	}
	return max(avg+(sample-avg)/8, 1)
}

func (w *window) observeHandler(d time.Duration) {
	w.mu.Lock()
	w.handler = ewma(w.handler, d)
	w.resize()
	w.mu.Unlock()
}

func (w *window) observeFetch(d time.Duration) {
	w.mu.Lock()
	w.fetch = ewma(w.fetch, d)
	w.resize()
	w.mu.Unlock()
}

func (w *window) observeSettle(d time.Duration) {
	w.mu.Lock()
	w.settle = ewma(w.settle, d)
	w.resize()
	w.mu.Unlock()
}

// resize recomputes size; w.mu must be held.
func (w *window) resize() {
	if w.handler == 0 {
		return
	}
	// Leases consumed during two fetch-and-settle round trips.
	extra := float64(w.concurrency) * 2 * float64(w.fetch+w.settle) / float64(w.handler)
	size := w.ceiling
	if extra < float64(w.ceiling) {
		size = w.concurrency + int(extra+0.999)
	}
	w.size = max(min(size, w.ceiling), min(w.concurrency, w.ceiling))
}

// limits returns the window's size and the smallest fetch worth making
// while the handlers still have queued work (refillMin).
func (w *window) limits() (size, minFetch int) {
	w.mu.Lock()
	size = w.size
	w.mu.Unlock()
	return size, refillMin(size)
}

// refillMin is the smallest fetch worth making into a window of size
// leases while the handlers still have queued work: a quarter of it (but
// no more than a fetch asks for, maxWindowFetch, or a deep window would
// never fill), so that a deep window is refilled in a few large fetches
// rather than one lease at a time as slots free up (each fetch is a round
// trip, and on Redis a script call on the server's one thread).
func refillMin(size int) int { return max(1, min(size/4, maxWindowFetch)) }
