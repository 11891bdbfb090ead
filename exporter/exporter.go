// Package exporter serves the health of a rheo store's consumer groups to
// Prometheus, the way kafka_exporter does for Kafka: lag per partition,
// leases held, available deliveries, dead letters, the age of the oldest
// pending event, and high watermarks, for every stream and group (or those
// chosen), on every backend.
//
// Mount it in a service:
//
//	http.Handle("/metrics", exporter.Handler(client, exporter.Options{}))
//
// or register the collector with a registry of your own:
//
//	prometheus.MustRegister(exporter.NewCollector(client, exporter.Options{}))
//
// `rheo metrics --dsn DSN` serves the same handler from the command line.
//
// Every scrape reads the store: per stream one high-watermark read, per group
// its lag and counts through rheo.Client.GroupInfos (which reads the
// stream's state and the oldest pending event of coinciding frontiers once
// for many groups), never a scan of events.
//
// # Series
//
//   - rheo_group_lag{stream,group,partition}: high watermark − committed frontier;
//   - rheo_group_inflight{stream,group}: leases held (expired ones nobody reclaimed yet included);
//   - rheo_group_available{stream,group}: deliveries claimable now or later, events not yet offered included;
//   - rheo_group_dead_letters{stream,group}: the group's dead letters;
//   - rheo_group_oldest_pending_age_seconds{stream,group}: seconds since the
//     timestamp of the oldest event the group has not acked or dead-lettered
//     (0 when nothing is pending);
//   - rheo_stream_high_watermark{stream,partition}: the partition's last sequence.
package exporter

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/health"
)

// Group names a consumer group.
type Group struct{ Stream, Group string }

// Options configures the collector. The zero Options reports every stream
// and group of the store.
type Options struct {
	// Groups restricts the report to these groups (and their streams).
	// Empty means every stream and group, including those created later.
	Groups []Group
	// Timeout bounds the reads of one scrape (default 10s).
	Timeout time.Duration
	// Concurrency is how many groups a scrape reads at once (default 8).
	Concurrency int
	// Clock tells the time for rheo_group_oldest_pending_age_seconds
	// (default clock.System).
	Clock rheo.Clock
}

// DefaultTimeout bounds one scrape unless Options.Timeout says otherwise.
const DefaultTimeout = 10 * time.Second

var (
	lagDesc = prometheus.NewDesc("rheo_group_lag",
		"High watermark minus the group's committed frontier, per partition.",
		[]string{"stream", "group", "partition"}, nil)
	inflightDesc = prometheus.NewDesc("rheo_group_inflight",
		"Leases the group holds, expired ones nobody reclaimed yet included.",
		[]string{"stream", "group"}, nil)
	availableDesc = prometheus.NewDesc("rheo_group_available",
		"Deliveries claimable now or later, events not yet offered included.",
		[]string{"stream", "group"}, nil)
	deadDesc = prometheus.NewDesc("rheo_group_dead_letters",
		"Dead letters of the group.",
		[]string{"stream", "group"}, nil)
	ageDesc = prometheus.NewDesc("rheo_group_oldest_pending_age_seconds",
		"Age of the oldest event the group has not acked or dead-lettered (0 when none).",
		[]string{"stream", "group"}, nil)
	hwDesc = prometheus.NewDesc("rheo_stream_high_watermark",
		"Last sequence of the partition.",
		[]string{"stream", "partition"}, nil)
)

// Collector is a prometheus.Collector reading a store's group health at
// scrape time. Create it with NewCollector.
type Collector struct {
	c    *rheo.Client
	opts Options
	// groups is opts.Groups in the form health.Read takes.
	groups []health.Group
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of c's group health.
func NewCollector(c *rheo.Client, opts Options) *Collector {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.System
	}
	gs := make([]health.Group, len(opts.Groups))
	for i, g := range opts.Groups {
		gs[i] = health.Group(g)
	}
	return &Collector{c: c, opts: opts, groups: gs}
}

// Describe implements prometheus.Collector.
func (k *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lagDesc, inflightDesc, availableDesc, deadDesc, ageDesc, hwDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A stream or group that cannot be
// read is reported as an error (the handler then answers 500, so that
// Prometheus marks the target down rather than showing stale numbers).
func (k *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
	defer cancel()
	snap, err := health.Read(ctx, k.c, k.groups, k.opts.Concurrency)
	now := k.opts.Clock.Now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range snap.Streams {
		for p, hw := range s.HighWatermarks {
			gauge(hwDesc, float64(hw), s.Name, strconv.Itoa(p))
		}
	}
	for _, g := range snap.Groups {
		for _, pl := range g.Lag.Partitions {
			gauge(lagDesc, float64(pl.Lag), g.Stream, g.Group, strconv.Itoa(pl.Partition))
		}
		gauge(inflightDesc, float64(g.Inflight), g.Stream, g.Group)
		gauge(availableDesc, float64(g.Available), g.Stream, g.Group)
		gauge(deadDesc, float64(g.DeadLetters), g.Stream, g.Group)
		age := 0.0
		if !g.OldestPending.IsZero() {
			age = max(now.Sub(g.OldestPending).Seconds(), 0)
		}
		gauge(ageDesc, age, g.Stream, g.Group)
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(lagDesc, err)
	}
}

// Handler returns an http.Handler serving c's group health in the
// Prometheus exposition format (text, or protobuf when asked), for /metrics.
// It answers 500 with the error when the store cannot be read.
func Handler(c *rheo.Client, opts Options) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c, opts))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}
