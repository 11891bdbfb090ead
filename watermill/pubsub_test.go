package rheowatermill_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	rheowatermill "github.com/rheo-go/rheo/watermill"
)

// features are what rheo guarantees; docs/watermill.md justifies each flag.
var features = tests.Features{
	ConsumerGroups:                      true,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	Persistent:                          true,
	RequireSingleInstance:               false,
	NewSubscriberReceivesOldMessages:    false,
	RestartServiceCommand:               nil,
	ContextPreserved:                    false,
	// The suite's long variants (5,000–10,000 messages, 50 subscribers)
	// take minutes per store on a small machine; the short ones exercise
	// the same paths.
	ForceShort: true,
}

// TestUniversalPubSub runs Watermill's own Pub/Sub test suite on every store.
func TestUniversalPubSub(t *testing.T) {
	for _, store := range storeNames {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, store)
			// Close every subscriber the suite made before the store goes
			// (TestPublishSubscribeInOrder closes its own too early: its
			// deferred Close runs before it subscribes).
			var mu sync.Mutex
			var subs []message.Subscriber
			t.Cleanup(func() {
				mu.Lock()
				defer mu.Unlock()
				for _, s := range subs {
					require.NoError(t, s.Close())
				}
			})
			constructor := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
				// Each Pub/Sub instance gets a client of its own over the
				// shared store, the way separate processes would: rheo
				// runs one consumer of a group per client.
				c := rheo.New(b, rheo.WithLeaseDuration(10*time.Second))
				pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c})
				require.NoError(t, err)
				sub, err := rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{
					Client:        c,
					ConsumerGroup: group,
					// Nacks in TestContinueAfterErrors must not exhaust
					// attempts into dead letters.
					Group:        rheo.GroupConfig{MaxAttempts: 1000},
					CloseTimeout: time.Second,
					PollInterval: 50 * time.Millisecond,
				})
				require.NoError(t, err)
				mu.Lock()
				subs = append(subs, sub)
				mu.Unlock()
				return pub, sub
			}
			tests.TestPubSub(t, features,
				func(t *testing.T) (message.Publisher, message.Subscriber) { return constructor(t, "") },
				constructor)
		})
	}
}
