package rheo

import (
	"testing"
	"time"
)

func TestDefaultMaxInflightIsTenPerHandlerWithinBounds(t *testing.T) {
	for _, c := range []struct{ concurrency, want int }{
		{0, 2000}, {1, 2000}, {8, 2000}, {100, 2000}, {200, 2000}, {201, 2010}, {999, 9990}, {1000, MaxLimit}, {MaxLimit, MaxLimit},
	} {
		if got := DefaultMaxInflight(c.concurrency); got != c.want {
			t.Errorf("DefaultMaxInflight(%d) = %d, want %d", c.concurrency, got, c.want)
		}
	}
}

func TestWindowStartsAtConcurrency(t *testing.T) {
	w := newWindow(8, 100)
	if size, minFetch := w.limits(); size != 8 || minFetch != 2 {
		t.Fatalf("fresh window %d (min fetch %d), want 8 (2)", size, minFetch)
	}
	// Fetch and settle times alone say nothing about the handlers.
	w.observeFetch(time.Millisecond)
	w.observeSettle(time.Millisecond)
	if size, _ := w.limits(); size != 8 {
		t.Fatalf("window %d before any handler returned, want 8", size)
	}
}

func TestWindowDeepensForFastHandlers(t *testing.T) {
	w := newWindow(100, 1000)
	w.observeFetch(2 * time.Millisecond)
	w.observeSettle(2 * time.Millisecond)
	for range 50 {
		w.observeHandler(10 * time.Microsecond)
	}
	if size, minFetch := w.limits(); size != 1000 || minFetch != 250 {
		t.Fatalf("window for no-op handlers %d (min fetch %d), want the ceiling 1000 (250)", size, minFetch)
	}
}

func TestWindowStaysNearConcurrencyForSlowHandlers(t *testing.T) {
	w := newWindow(4, 100)
	w.observeFetch(time.Millisecond)
	w.observeSettle(time.Millisecond)
	w.observeHandler(time.Second)
	// 4 handlers of 1s consume 4 leases a second; two 2ms round trips take
	// 0.016 of them: one lease beyond the handlers.
	if size, _ := w.limits(); size != 5 {
		t.Fatalf("window for 1s handlers %d, want 5", size)
	}
}

func TestWindowFollowsHandlerTime(t *testing.T) {
	w := newWindow(10, 100)
	w.observeFetch(time.Millisecond)
	w.observeSettle(time.Millisecond)
	w.observeHandler(10 * time.Millisecond)
	// 10 handlers × 2 × 2ms / 10ms = 4 beyond them.
	if size, _ := w.limits(); size != 14 {
		t.Fatalf("window for 10ms handlers %d, want 14", size)
	}
	// Handlers speeding up deepen it, within the ceiling.
	for range 100 {
		w.observeHandler(100 * time.Microsecond)
	}
	if size, _ := w.limits(); size != 100 {
		t.Fatalf("window after handlers sped up %d, want 100", size)
	}
	// And slowing down again shrinks it back towards Concurrency.
	for range 200 {
		w.observeHandler(time.Second)
	}
	if size, _ := w.limits(); size != 11 {
		t.Fatalf("window after handlers slowed down %d, want 11", size)
	}
}

func TestWindowCeilingBelowConcurrency(t *testing.T) {
	// An explicit ceiling is never exceeded, even by the start size.
	w := newWindow(50, 20)
	w.observeHandler(time.Second)
	if size, _ := w.limits(); size != 20 {
		t.Fatalf("window %d, want the ceiling 20", size)
	}
}
