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
