package rheo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// Run a consumer whose handler acks, dead-letters with Reject and retries
// later with RetryAfter.
func Example_consumer() {
	ctx := context.Background()
	client := rheo.New(memory.New())
	defer client.Close()
	_ = client.CreateStream(ctx, "orders", rheo.StreamConfig{})
	_ = client.CreateGroup(ctx, "orders", "shipping", rheo.GroupConfig{})
	for _, p := range []string{`{"order":1}`, `{"order":"oops"}`, `{"order":3}`} {
		_, _ = client.Append(ctx, "orders", rheo.Message{Type: "order_placed", Payload: json.RawMessage(p)})
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	carrierBusy := true
	consumer, err := client.NewConsumer(rheo.ConsumerConfig{
		Stream: "orders", Group: "shipping",
		PollInterval: 10 * time.Millisecond,
		Handler: func(ctx context.Context, e rheo.Event) error {
			lease, _ := rheo.LeaseFromContext(ctx)
			var o struct{ Order int }
			if json.Unmarshal(e.Payload, &o) != nil {
				// It will never parse: dead-letter it instead of retrying.
				fmt.Println("event", e.Sequence, "rejected")
				return rheo.Reject(errors.New("order is not a number"))
			}
			if o.Order == 3 && carrierBusy {
				carrierBusy = false
				fmt.Println("order 3: carrier busy, retry shortly")
				return rheo.RetryAfter(20*time.Millisecond, errors.New("carrier busy"))
			}
			fmt.Println("order", o.Order, "shipped on attempt", lease.Attempt)
			if o.Order == 3 {
				stop() // everything is handled: stop the example
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := consumer.Run(ctx); err != nil { // returns after a clean stop
		fmt.Println(err)
	}

	dead, _ := client.DeadLetters(context.Background(), "orders", "shipping", rheo.DeadLetterOptions{})
	for _, d := range dead {
		fmt.Println("dead letter:", d.Sequence, d.Reason)
	}
	lag, _ := client.Lag(context.Background(), "orders", "shipping")
	fmt.Println("lag", lag.Total)
	// Output:
	// order 1 shipped on attempt 1
	// event 2 rejected
	// order 3: carrier busy, retry shortly
	// order 3 shipped on attempt 2
	// dead letter: 2 order is not a number
	// lag 0
}
