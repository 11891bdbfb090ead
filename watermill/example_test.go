package rheowatermill_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	rheowatermill "github.com/rheo-go/rheo/watermill"
)

var errOutOfStock = errors.New("out of stock")

// A Watermill Router consuming a rheo stream: a handler that fails now and
// then is retried in process (Retry), then by rheo (nack, redelivery), and
// an order that can never succeed ends in rheo's dead letters (DeadLetter),
// from where it can be inspected and redriven.
func Example_router() {
	ctx := context.Background()
	client := rheo.New(memory.New(), rheo.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer client.Close()

	pub, _ := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: client})
	sub, _ := rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{
		Client:        client,
		ConsumerGroup: "billing",
		Group:         rheo.GroupConfig{MaxAttempts: 3},
	})

	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddMiddleware(
		middleware.Recoverer,
		middleware.CorrelationID,
		// Permanent errors go to rheo's dead letters at once; others are
		// nacked with their message as the reason.
		rheowatermill.DeadLetter(func(err error) bool { return errors.Is(err, errOutOfStock) }),
		middleware.Retry{MaxRetries: 1, InitialInterval: time.Millisecond}.Middleware,
	)

	var mu sync.Mutex
	var billed []string
	attempts := map[string]int{}
	router.AddConsumerHandler("bill", "orders", sub, func(msg *message.Message) error {
		order := msg.Metadata.Get("order")
		mu.Lock()
		defer mu.Unlock()
		attempts[order]++
		switch {
		case order == "o-3":
			return fmt.Errorf("order %s: %w", order, errOutOfStock)
		case order == "o-2" && attempts[order] <= 2:
			return errors.New("payment gateway timeout") // the first delivery and its retry fail
		}
		billed = append(billed, order)
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	for i := 1; i <= 4; i++ {
		msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"amount":%d}`, i*10))
		msg.Metadata.Set("order", fmt.Sprintf("o-%d", i))
		_ = pub.Publish("orders", msg)
	}

	// Wait until the group has settled everything.
	for {
		info, _ := client.GroupInfo(ctx, "orders", "billing")
		if info.Lag.Total == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = router.Close()

	slices.Sort(billed)
	fmt.Println("billed:", billed)
	dls, _ := client.DeadLetters(ctx, "orders", "billing", rheo.DeadLetterOptions{})
	for _, d := range dls {
		fmt.Printf("dead letter: order %s after %d attempt(s): %s\n", d.Event.Metadata["order"], d.Attempts, d.Reason)
	}
	// Output:
	// billed: [o-1 o-2 o-4]
	// dead letter: order o-3 after 1 attempt(s): order o-3: out of stock
}
