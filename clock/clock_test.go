package clock_test

import (
	"testing"
	"time"

	"github.com/rheo-go/rheo/clock"
)

func TestFrozenStaysPutUntilMoved(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := clock.NewFrozen(t0)
	if !c.Now().Equal(t0) {
		t.Fatalf("Now = %v, want %v", c.Now(), t0)
	}
	if got := c.Advance(1500 * time.Millisecond); !got.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("Advance returned %v", got)
	}
	c.Advance(-time.Hour)
	if !c.Now().Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("negative Advance moved the clock to %v", c.Now())
	}
	c.Set(t0.Add(-time.Minute))
	if !c.Now().Equal(t0.Add(-time.Minute)) {
		t.Fatalf("Set did not move the clock back: %v", c.Now())
	}
}

func TestSystemFollowsTheWallClock(t *testing.T) {
	before := time.Now()
	got := clock.System.Now()
	if got.Before(before) || got.Sub(before) > time.Minute {
		t.Fatalf("System.Now = %v, wall clock %v", got, before)
	}
}
