package rheo

import (
	"testing"
	"time"
)

func TestFetchBackoffDoublesFrom100msTo5s(t *testing.T) {
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	var d time.Duration
	for i, w := range want {
		d = nextFetchBackoff(d)
		if d != w*time.Millisecond {
			t.Fatalf("step %d: backoff %v, want %v", i, d, w*time.Millisecond)
		}
	}
}
