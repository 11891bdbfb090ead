package memory_test

import (
	"testing"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/rheotest"
)

// BenchmarkFetchAckFresh is rheotest.BenchFetchAckFresh on the memory
// store: fetch, ack and lag read of 100 fresh events on 4 and 1,024
// partitions.
func BenchmarkFetchAckFresh(b *testing.B) {
	rheotest.BenchFetchAckFresh(b, func(testing.TB) rheo.Backend { return memory.New() })
}
