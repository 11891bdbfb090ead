package rheo_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// A worker that will not get to a lease hands it back with Release: the
// event is available again at once, and the claim does not count as an
// attempt, so a worker shutting down does not use up MaxAttempts of work
// it never started. A Nack counts; a released lease is stale.
func ExampleClient_Release() {
	ctx := context.Background()
	client := rheo.New(memory.New())
	_ = client.CreateStream(ctx, "orders", rheo.StreamConfig{})
	_ = client.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{MaxAttempts: 2})
	_, _ = client.Append(ctx, "orders", rheo.Message{Type: "order_created"})

	l, _ := client.Fetch(ctx, "orders", "billing", rheo.FetchOptions{})
	fmt.Println("leased, attempt", l[0].Attempt)
	_ = client.Release(ctx, l[0])
	fmt.Println("stale after release:", errors.Is(client.Ack(ctx, l[0]), rheo.ErrStaleLease))

	l, _ = client.Fetch(ctx, "orders", "billing", rheo.FetchOptions{})
	fmt.Println("leased again, attempt", l[0].Attempt)
	_ = client.Nack(ctx, l[0], "payment service down")
	l, _ = client.Fetch(ctx, "orders", "billing", rheo.FetchOptions{})
	fmt.Println("after a nack, attempt", l[0].Attempt)
	// Output:
	// leased, attempt 1
	// stale after release: true
	// leased again, attempt 1
	// after a nack, attempt 2
}
