package exporter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/exporter"
	"github.com/rheo-go/rheo/internal/teststore"
)

// BenchmarkScrape times one GET /metrics of a store with 10, 100 and 1,000
// groups on one 4-partition stream of 400 events. Every group lags in every
// partition, the most expensive case: the oldest pending timestamp needs
// the event at each partition's frontier. With frontiers=same every group
// starts at the beginning, so their frontiers coincide (the scrape reads
// those events once per chunk of groups); with frontiers=spread group g
// starts after sequence g%100, so a chunk of groups shares few. Groups are
// read 8 chunks at a time (the default). As a same-run baseline it reports
// what one GroupInfo costs when called alone, one after another.
func BenchmarkScrape(b *testing.B) {
	for _, s := range []teststore.Store{teststore.SQLite, teststore.Postgres} {
		for _, bc := range []struct {
			groups int
			spread bool
		}{{10, false}, {100, false}, {1000, false}, {1000, true}} {
			groups, layout := bc.groups, "same"
			if bc.spread {
				layout = "spread"
			}
			b.Run(fmt.Sprintf("%s/groups=%d/frontiers=%s", s.Name, groups, layout), func(b *testing.B) {
				be, _ := s.Open(b)
				c := rheo.New(be)
				ctx := context.Background()
				if err := c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 4}); err != nil {
					b.Fatal(err)
				}
				ms := make([]rheo.Message, 400)
				for i := range ms {
					ms[i] = rheo.Message{Key: fmt.Sprint(i)}
				}
				if _, err := c.AppendBatch(ctx, "orders", ms); err != nil {
					b.Fatal(err)
				}
				for g := range groups {
					cfg := rheo.GroupConfig{}
					if bc.spread {
						cfg.Start = rheo.AfterSequence(int64(g % 100))
					}
					if err := c.CreateGroup(ctx, "orders", fmt.Sprintf("g%04d", g), cfg); err != nil {
						b.Fatal(err)
					}
				}
				// Same-run baseline: the GroupInfo calls a scrape makes,
				// one after another, without the exporter.
				start := time.Now()
				for g := range groups {
					if _, err := c.GroupInfo(ctx, "orders", fmt.Sprintf("g%04d", g)); err != nil {
						b.Fatal(err)
					}
				}
				perInfo := time.Since(start) / time.Duration(groups)
				srv := httptest.NewServer(exporter.Handler(c, exporter.Options{Timeout: 5 * time.Minute}))
				defer srv.Close()
				for b.Loop() {
					resp, err := http.Get(srv.URL)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || n == 0 {
						b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/scrape")
				b.ReportMetric(float64(perInfo.Microseconds())/1000, "ms/sequential-GroupInfo")
			})
		}
	}
}
