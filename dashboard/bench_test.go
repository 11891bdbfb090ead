package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/dashboard"
)

// The pages never scan events: their cost must not grow with the log. Each
// benchmark pairs a small log with a big one of the same shape; compare the
// two (ns/op) rather than absolute figures.
//
//	go test -run '^$' -bench . -benchtime 20x ./dashboard

// buildStreams creates streams × groups, each stream with events events
// and each group part-way through them (acked, leased, dead-lettered).
func buildStreams(b *testing.B, c *rheo.Client, streams, groups, events int) {
	ctx := context.Background()
	batch := make([]rheo.Message, 0, 10000)
	for s := range streams {
		name := fmt.Sprintf("stream-%03d", s)
		if err := c.CreateStream(ctx, name, rheo.StreamConfig{Partitions: 4}); err != nil {
			b.Fatal(err)
		}
		for done := 0; done < events; {
			batch = batch[:0]
			for range min(cap(batch), events-done) {
				batch = append(batch, rheo.Message{Key: fmt.Sprintf("k%d", done%97), Payload: []byte(`{"n":1}`)})
				done++
			}
			if _, err := c.AppendBatch(ctx, name, batch); err != nil {
				b.Fatal(err)
			}
		}
		for g := range groups {
			group := fmt.Sprintf("group-%d", g)
			if err := c.CreateGroup(ctx, name, group, rheo.GroupConfig{}); err != nil {
				b.Fatal(err)
			}
			ls, err := c.Fetch(ctx, name, group, rheo.FetchOptions{Limit: 40})
			if err != nil {
				b.Fatal(err)
			}
			for i, l := range ls {
				switch {
				case i < 30:
					err = c.Ack(ctx, l)
				case i < 35:
					err = c.Reject(ctx, l, "bench")
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

func benchPage(b *testing.B, c *rheo.Client, path string) {
	d := dashboard.New(c, dashboard.WithSampleInterval(0))
	defer d.Close()
	req := httptest.NewRequest("GET", path, nil)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

func benchClient(b *testing.B, kind string) *rheo.Client {
	return rheo.New(newBackend(b, kind))
}

// BenchmarkOverview renders the overview of 100 streams × 5 groups, with
// 100 and with 10,000 events per stream (2,000 on SQLite, to keep the build
// short).
func BenchmarkOverview(b *testing.B) {
	for _, bc := range []struct {
		kind   string
		events []int
	}{{"memory", []int{100, 10000}}, {"sqlite", []int{100, 2000}}} {
		kind := bc.kind
		for _, events := range bc.events {
			b.Run(fmt.Sprintf("%s/streams=100/groups=5/events=%d", kind, events), func(b *testing.B) {
				c := benchClient(b, kind)
				start := time.Now()
				buildStreams(b, c, 100, 5, events)
				b.Logf("built in %v", time.Since(start))
				benchPage(b, c, "/")
			})
		}
	}
}

// BenchmarkGroupPage renders the group page of a group 35 events into a
// stream of 1,000 and of 1,000,000 events (backlog, leases, dead letters).
func BenchmarkGroupPage(b *testing.B) {
	for _, kind := range []string{"memory", "sqlite"} {
		for _, events := range []int{1000, 1000000} {
			b.Run(fmt.Sprintf("%s/events=%d", kind, events), func(b *testing.B) {
				c := benchClient(b, kind)
				start := time.Now()
				buildStreams(b, c, 1, 1, events)
				b.Logf("built in %v", time.Since(start))
				benchPage(b, c, "/streams/stream-000/groups/group-0")
			})
		}
	}
}
