package id

import (
	"sync"
	"testing"

	"github.com/google/uuid"
)

func TestEventIsOrderedUniqueUUIDv7(t *testing.T) {
	const n = 20000
	prev := ""
	for range n {
		s := Event()
		u, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != s {
			t.Fatalf("%q: version %d variant %v, want a canonical UUIDv7", s, u.Version(), u.Variant())
		}
		if s <= prev {
			t.Fatalf("%q does not sort after %q", s, prev)
		}
		prev = s
	}
}

func TestEventCounterOverflowBorrowsTheNextMillisecond(t *testing.T) {
	old := now
	defer func() { now = old }()
	now = func() int64 { return 1 << 40 } // a stopped clock
	prev := ""
	for range 3 * 4096 {
		s := Event()
		if s <= prev {
			t.Fatalf("%q does not sort after %q", s, prev)
		}
		prev = s
	}
	u := uuid.MustParse(prev)
	sec, _ := u.Time().UnixTime()
	if ms := sec * 1000; ms < 1<<40 {
		t.Fatalf("time %d went back", ms)
	}
	// The clock stepping back keeps the order too.
	now = func() int64 { return 1 << 39 }
	if s := Event(); s <= prev {
		t.Fatalf("after the clock stepped back, %q does not sort after %q", s, prev)
	}
}

func TestEventConcurrentUnique(t *testing.T) {
	const workers, each = 4, 5000
	var mu sync.Mutex
	seen := make(map[string]bool, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			ids := make([]string, each)
			for i := range ids {
				ids[i] = Event()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, s := range ids {
				if seen[s] {
					t.Errorf("duplicate ID %s", s)
				}
				seen[s] = true
			}
		})
	}
	wg.Wait()
}

// Events makes the same IDs as Event, in order with Event's, across its
// chunks and across a stopped clock's overflow.
func TestEventsAreOrderedUniqueUUIDv7(t *testing.T) {
	old := now
	defer func() { now = old }()
	for _, clock := range []func() int64{old, func() int64 { return 1 << 40 }} {
		now = clock
		prev := Event()
		for _, n := range []int{0, 1, 63, 64, 65, 1000, 5000} {
			block := Events(n)
			if len(block) != 36*n {
				t.Fatalf("Events(%d) is %d bytes", n, len(block))
			}
			for i := range n {
				s := block[36*i : 36*(i+1)]
				u, err := uuid.Parse(s)
				if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != s {
					t.Fatalf("%q: %v, want a canonical UUIDv7", s, err)
				}
				if s <= prev {
					t.Fatalf("%q does not sort after %q", s, prev)
				}
				prev = s
			}
			if s := Event(); s <= prev {
				t.Fatalf("%q does not sort after %q", s, prev)
			} else {
				prev = s
			}
		}
	}
}

func TestEventsConcurrentUnique(t *testing.T) {
	const workers, batches, each = 4, 50, 100
	var mu sync.Mutex
	seen := make(map[string]bool, workers*batches*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var blocks []string
			for range batches {
				blocks = append(blocks, Events(each), Event())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, b := range blocks {
				for i := 0; i < len(b); i += 36 {
					if s := b[i : i+36]; seen[s] {
						t.Errorf("duplicate ID %s", s)
					} else {
						seen[s] = true
					}
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkEvents100(b *testing.B) {
	for b.Loop() {
		_ = Events(100)
	}
}

func BenchmarkEvent(b *testing.B) {
	for b.Loop() {
		_ = Event()
	}
}

// BenchmarkEventGoogleV7 is the generator Event replaced, for comparison.
func BenchmarkEventGoogleV7(b *testing.B) {
	for b.Loop() {
		u, _ := uuid.NewV7()
		_ = u.String()
	}
}
