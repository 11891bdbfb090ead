// Package clock provides the clocks rheo reads for all lease arithmetic.
//
// Production code uses System. Tests use a Frozen clock and move it by hand,
// so lease expiry is driven without sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time. rheo.Clock is the same interface.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// System is the wall clock.
var System Clock = systemClock{}

// Frozen is a clock that only moves when told to. It is safe for concurrent use.
type Frozen struct {
	mu  sync.Mutex
	now time.Time
}

// NewFrozen returns a Frozen clock stopped at t.
func NewFrozen(t time.Time) *Frozen { return &Frozen{now: t} }

// Now returns the frozen time.
func (f *Frozen) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set moves the clock to t (backwards too).
func (f *Frozen) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Advance moves the clock forward by d and returns the new time.
// A negative d is ignored: time read through Advance never goes backwards.
func (f *Frozen) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d > 0 {
		f.now = f.now.Add(d)
	}
	return f.now
}
