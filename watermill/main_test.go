package rheowatermill_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when any goroutine outlives the tests (a
// subscription, router or renewal left running), after closing the shared
// PostgreSQL pool.
func TestMain(m *testing.M) {
	code := m.Run()
	if pgPool != nil {
		pgPool.Close()
	}
	if code == 0 {
		// watermill-redisstream's reader (benchmarked against the adapter)
		// sleeps out its back-off after Close before it returns.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream.(*Subscriber).read")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}
