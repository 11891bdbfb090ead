package rheo_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// The timeline that matters: worker A leases an event and dies; its lease
// expires; worker B leases the same event; A's late ack is refused as stale,
// and only B's ack counts. A frozen clock moves time without sleeping.
func Example_staleAck() {
	ctx := context.Background()
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := rheo.New(memory.New(), rheo.WithClock(clk))

	_ = client.CreateStream(ctx, "orders", rheo.StreamConfig{})
	_ = client.CreateGroup(ctx, "orders", "fulfillment", rheo.GroupConfig{})
	_, _ = client.Append(ctx, "orders", rheo.Message{Type: "order_created"})

	// t0: worker A fetches event E under lease L1 (and then "crashes").
	a, _ := client.Fetch(ctx, "orders", "fulfillment", rheo.FetchOptions{ConsumerID: "A", LeaseDuration: 2 * time.Second})
	lag, _ := client.Lag(ctx, "orders", "fulfillment")
	fmt.Println("t1 A holds attempt", a[0].Attempt, "- lag", lag.Total)

	// t2: L1 expires.
	clk.Advance(2 * time.Second)

	// t3: worker B fetches E under lease L2.
	b, _ := client.Fetch(ctx, "orders", "fulfillment", rheo.FetchOptions{ConsumerID: "B"})
	fmt.Println("t3 B holds attempt", b[0].Attempt, "- same event:", b[0].Event.ID == a[0].Event.ID)

	// t4: A comes back and acks with L1: refused.
	err := client.Ack(ctx, a[0])
	fmt.Println("t4 A's ack stale:", errors.Is(err, rheo.ErrStaleLease), "- classified", rheo.Classify(err))

	// t5: B acks with L2: durable progress.
	fmt.Println("t5 B's ack:", client.Ack(ctx, b[0]))
	lag, _ = client.Lag(ctx, "orders", "fulfillment")
	fmt.Println("lag", lag.Total)
	// Output:
	// t1 A holds attempt 1 - lag 1
	// t3 B holds attempt 2 - same event: true
	// t4 A's ack stale: true - classified lost
	// t5 B's ack: <nil>
	// lag 0
}
