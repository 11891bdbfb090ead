package postgres_test

import (
	"testing"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/rheotest"
)

// TestClockSkewAgreesWithMemory: clocks that disagree give the results the
// memory backend gives (a nack is due at its own time to every fetcher).
func TestClockSkewAgreesWithMemory(t *testing.T) {
	rheotest.RunClockSkew(t, func(t testing.TB) rheo.Backend { return newBackend(t) }, rheotest.ClockSkewOptions{Seeds: 4, Steps: 300})
}
