package rheo_test

import (
	"context"
	"fmt"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// After shipping a bad handler, reopen the group's history and process it
// again. Other groups and the events themselves are untouched.
func Example_replay() {
	ctx := context.Background()
	client := rheo.New(memory.New())
	_ = client.CreateStream(ctx, "orders", rheo.StreamConfig{})
	_ = client.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{})
	for range 3 {
		_, _ = client.Append(ctx, "orders", rheo.Message{Type: "order_created"})
	}
	leases, _ := client.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 10})
	_ = client.AckBatch(ctx, leases)
	lag, _ := client.Lag(ctx, "orders", "billing")
	fmt.Println("before replay: lag", lag.Total)

	// Reopen everything after sequence 1.
	reopened, _ := client.Replay(ctx, "orders", "billing", rheo.FromSequence(1))
	lag, _ = client.Lag(ctx, "orders", "billing")
	fmt.Println("after replay: reopened", reopened, "lag", lag.Total)

	leases, _ = client.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 10})
	for _, l := range leases {
		fmt.Println("redelivered sequence", l.Event.Sequence, "attempt", l.Attempt)
	}
	// Output:
	// before replay: lag 0
	// after replay: reopened 2 lag 2
	// redelivered sequence 2 attempt 1
	// redelivered sequence 3 attempt 1
}
