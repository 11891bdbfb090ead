package exporter_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/exporter"
	"github.com/rheo-go/rheo/internal/teststore"
)

// scrape GETs /metrics and parses it with the Prometheus text parser into
// series name -> label string -> value.
func scrape(t *testing.T, url string) map[string]map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytesReader(body))
	require.NoError(t, err)
	out := map[string]map[string]float64{}
	for name, f := range fams {
		require.Equal(t, dto.MetricType_GAUGE, f.GetType(), name)
		out[name] = map[string]float64{}
		for _, m := range f.GetMetric() {
			out[name][labelString(m.GetLabel())] = m.GetGauge().GetValue()
		}
	}
	return out
}

func labelString(ls []*dto.LabelPair) string {
	s := ""
	for _, l := range ls { // the parser sorts labels by name
		s += l.GetName() + "=" + l.GetValue() + ","
	}
	return s
}

func groupLabels(stream, group string) string {
	return "group=" + group + ",stream=" + stream + ","
}

// expected builds the series the exporter must serve from Lag and GroupInfo.
func expected(t *testing.T, c *rheo.Client, now time.Time) map[string]map[string]float64 {
	t.Helper()
	ctx := context.Background()
	want := map[string]map[string]float64{
		"rheo_group_lag": {}, "rheo_group_inflight": {}, "rheo_group_available": {},
		"rheo_group_dead_letters": {}, "rheo_group_oldest_pending_age_seconds": {}, "rheo_stream_high_watermark": {},
	}
	streams, err := c.ListStreams(ctx)
	require.NoError(t, err)
	for _, s := range streams {
		st, err := c.Backend().Stream(ctx, s.Name)
		require.NoError(t, err)
		for p, hw := range st.HighWatermarks {
			want["rheo_stream_high_watermark"][fmt.Sprintf("partition=%d,stream=%s,", p, s.Name)] = float64(hw)
		}
		groups, err := c.ListGroups(ctx, s.Name)
		require.NoError(t, err)
		for _, g := range groups {
			lag, err := c.Lag(ctx, s.Name, g)
			require.NoError(t, err)
			for _, pl := range lag.Partitions {
				want["rheo_group_lag"][fmt.Sprintf("group=%s,partition=%d,stream=%s,", g, pl.Partition, s.Name)] = float64(pl.Lag)
			}
			info, err := c.GroupInfo(ctx, s.Name, g)
			require.NoError(t, err)
			l := groupLabels(s.Name, g)
			want["rheo_group_inflight"][l] = float64(info.Inflight)
			want["rheo_group_available"][l] = float64(info.Available)
			want["rheo_group_dead_letters"][l] = float64(info.DeadLetters)
			age := 0.0
			if !info.OldestPending.IsZero() {
				age = now.Sub(info.OldestPending).Seconds()
			}
			want["rheo_group_oldest_pending_age_seconds"][l] = age
		}
	}
	return want
}

// Every series matches Lag and GroupInfo on every backend, after acks,
// nacks, dead letters, held leases and a replay.
func TestExporterMatchesGroupInfo(t *testing.T) {
	for _, s := range teststore.All() {
		t.Run(s.Name, func(t *testing.T) {
			b, _ := s.Open(t)
			clk := clock.NewFrozen(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			c := rheo.New(b, rheo.WithClock(clk))
			ctx := context.Background()
			require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 3}))
			require.NoError(t, c.CreateStream(ctx, "audit", rheo.StreamConfig{}))
			require.NoError(t, c.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))
			require.NoError(t, c.CreateGroup(ctx, "orders", "shipping", rheo.GroupConfig{}))
			require.NoError(t, c.CreateGroup(ctx, "audit", "archive", rheo.GroupConfig{}))
			for i := range 12 {
				_, err := c.Append(ctx, "orders", rheo.Message{Key: strconv.Itoa(i)})
				require.NoError(t, err)
				clk.Advance(time.Second)
			}
			srv := httptest.NewServer(exporter.Handler(c, exporter.Options{Clock: clk}))
			defer srv.Close()
			check := func(stage string) {
				t.Helper()
				got := scrape(t, srv.URL)
				want := expected(t, c, clk.Now())
				require.Equal(t, want, got, stage)
			}
			check("fresh")

			ls, err := c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 6})
			require.NoError(t, err)
			require.Len(t, ls, 6)
			require.NoError(t, c.AckBatch(ctx, ls[:3]))
			require.NoError(t, c.Nack(ctx, ls[3], "later"))
			require.NoError(t, c.Reject(ctx, ls[4], "bad"))
			_, err = c.Fetch(ctx, "orders", "shipping", rheo.FetchOptions{Limit: 2})
			require.NoError(t, err)
			clk.Advance(time.Minute)
			check("after acks, a nack, a dead letter and held leases")
			got := scrape(t, srv.URL)
			require.Equal(t, 1.0, got["rheo_group_dead_letters"][groupLabels("orders", "billing")])
			require.Equal(t, 3.0, got["rheo_group_inflight"][groupLabels("orders", "billing")]+got["rheo_group_inflight"][groupLabels("orders", "shipping")])
			require.Positive(t, got["rheo_group_oldest_pending_age_seconds"][groupLabels("orders", "billing")])
			require.Zero(t, got["rheo_group_oldest_pending_age_seconds"][groupLabels("audit", "archive")], "nothing pending")

			// Drain billing completely, then replay it from the start.
			for {
				ls, err := c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 100})
				require.NoError(t, err)
				if len(ls) == 0 {
					break
				}
				require.NoError(t, c.AckBatch(ctx, ls))
			}
			clk.Advance(10 * time.Minute) // the held leases expire; nothing else changes
			check("billing drained")
			got = scrape(t, srv.URL)
			require.Zero(t, got["rheo_group_oldest_pending_age_seconds"][groupLabels("orders", "billing")])
			require.Equal(t, 1.0, got["rheo_group_dead_letters"][groupLabels("orders", "billing")])
			_, err = c.Replay(ctx, "orders", "billing", rheo.FromSequence(0))
			require.NoError(t, err)
			check("after a replay")
			got = scrape(t, srv.URL)
			require.Zero(t, got["rheo_group_dead_letters"][groupLabels("orders", "billing")], "a replay clears dead letters")
			total := 0.0
			for l, v := range got["rheo_group_lag"] {
				if l[:len("group=billing")] == "group=billing" {
					total += v
				}
			}
			require.Equal(t, 12.0, total, "replay from the start reopens everything")
		})
	}
}

// Options.Groups restricts the report to the chosen groups and their streams.
func TestExporterChosenGroups(t *testing.T) {
	b, _ := teststore.Memory.Open(t)
	c := rheo.New(b)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{}))
	require.NoError(t, c.CreateStream(ctx, "audit", rheo.StreamConfig{}))
	require.NoError(t, c.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))
	require.NoError(t, c.CreateGroup(ctx, "orders", "shipping", rheo.GroupConfig{}))
	srv := httptest.NewServer(exporter.Handler(c, exporter.Options{Groups: []exporter.Group{{Stream: "orders", Group: "billing"}}}))
	defer srv.Close()
	got := scrape(t, srv.URL)
	require.Equal(t, map[string]float64{groupLabels("orders", "billing"): 0}, got["rheo_group_inflight"])
	require.Equal(t, map[string]float64{"partition=0,stream=orders,": 0}, got["rheo_stream_high_watermark"])
}

// A store that cannot be read answers 500 (Prometheus marks the target
// down) rather than an empty page.
func TestExporterFailsWhenStoreFails(t *testing.T) {
	b, _ := teststore.Memory.Open(t)
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(context.Background(), "orders", rheo.StreamConfig{}))
	require.NoError(t, c.Close())
	rec := httptest.NewRecorder()
	exporter.Handler(c, exporter.Options{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, rec.Body.String(), "client closed")
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
