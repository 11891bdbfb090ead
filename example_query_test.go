package rheo_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// Search the log by payload field and page through the results with a
// cursor; QueryAll does the paging for you.
func Example_queryPaging() {
	ctx := context.Background()
	client := rheo.New(memory.New())
	_ = client.CreateStream(ctx, "prices", rheo.StreamConfig{Partitions: 2})
	for i, ccy := range []string{"EUR", "USD", "EUR", "GBP", "EUR", "EUR"} {
		_, _ = client.Append(ctx, "prices", rheo.Message{
			Type:    "curve_update",
			Key:     ccy,
			Payload: json.RawMessage(fmt.Sprintf(`{"currency":%q,"n":%d}`, ccy, i)),
		})
	}

	q := rheo.Query{Stream: "prices", Payload: map[string]any{"currency": "EUR"}, Limit: 3}
	page, _ := client.QueryPage(ctx, q)
	fmt.Println("page 1:", len(page.Events), "events, more:", page.NextCursor != "")
	q.Cursor = page.NextCursor
	page, _ = client.QueryPage(ctx, q)
	fmt.Println("page 2:", len(page.Events), "events, more:", page.NextCursor != "")

	q.Cursor, q.Limit = "", 2
	n := 0
	for ev, err := range client.QueryAll(ctx, q) {
		if err != nil {
			panic(err)
		}
		var p struct{ N int }
		_ = json.Unmarshal(ev.Payload, &p)
		n += p.N
	}
	fmt.Println("sum of n over all EUR events:", n)
	// Output:
	// page 1: 3 events, more: true
	// page 2: 1 events, more: false
	// sum of n over all EUR events: 11
}
