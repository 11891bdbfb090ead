package rheo_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// Append an event, lease it to a worker, and ack the lease.
func Example_appendFetchAck() {
	ctx := context.Background()
	client := rheo.New(memory.New())
	defer client.Close()

	_ = client.CreateStream(ctx, "orders", rheo.StreamConfig{})
	_ = client.CreateGroup(ctx, "orders", "fulfillment", rheo.GroupConfig{})

	ev, _ := client.Append(ctx, "orders", rheo.Message{
		Type:    "order_created",
		Key:     "cust-1",
		Payload: json.RawMessage(`{"order": 42}`),
	})
	fmt.Println("appended sequence", ev.Sequence)

	leases, _ := client.Fetch(ctx, "orders", "fulfillment", rheo.FetchOptions{Limit: 10})
	l := leases[0]
	fmt.Println("leased", l.Event.Type, "attempt", l.Attempt, string(l.Event.Payload))

	if err := client.Ack(ctx, l); err != nil {
		fmt.Println("ack:", err)
	}
	lag, _ := client.Lag(ctx, "orders", "fulfillment")
	fmt.Println("lag", lag.Total)
	// Output:
	// appended sequence 1
	// leased order_created attempt 1 {"order":42}
	// lag 0
}
