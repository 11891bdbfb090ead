package rheotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/health"
)

// Group names a consumer group for WatchGroups.
type Group struct{ Stream, Group string }

// WatchGroups registers asynchronous gauges with the health of the given
// groups, or of every stream and group of c's store when none are given
// (streams and groups created later included). They are read through
// GroupInfo once per collection, by the metric reader's schedule, never on
// the hot path:
//
//   - rheo.group.lag {stream, group, partition}: high watermark − committed frontier;
//   - rheo.group.inflight, rheo.group.available, rheo.group.dead_letters {stream, group};
//   - rheo.group.oldest_pending.age {stream, group}: seconds since the
//     timestamp of the oldest event not yet terminal (0 when none);
//   - rheo.stream.high_watermark {stream, partition}.
//
// A group that cannot be read is left out of that collection. stop
// unregisters the gauges.
func (i *Instrumentation) WatchGroups(c *rheo.Client, groups ...Group) (stop func() error, err error) {
	var errs [6]error
	var lag, inflight, available, dead, hw metric.Int64ObservableGauge
	var age metric.Float64ObservableGauge
	lag, errs[0] = i.meter.Int64ObservableGauge(MetricGroupLag, metric.WithUnit("{message}"),
		metric.WithDescription("High watermark minus committed frontier, per partition."))
	inflight, errs[1] = i.meter.Int64ObservableGauge(MetricGroupInflight, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held, expired ones nobody reclaimed yet included."))
	available, errs[2] = i.meter.Int64ObservableGauge(MetricGroupAvailable, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries claimable now or later, events not yet offered included."))
	dead, errs[3] = i.meter.Int64ObservableGauge(MetricGroupDeadLetters, metric.WithUnit("{message}"),
		metric.WithDescription("Dead letters of the group."))
	age, errs[4] = i.meter.Float64ObservableGauge(MetricGroupOldestPending, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest event not yet acked or dead-lettered (0 when none)."))
	hw, errs[5] = i.meter.Int64ObservableGauge(MetricHighWatermark, metric.WithUnit("{message}"),
		metric.WithDescription("Last sequence of each partition."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	watch := make([]health.Group, len(groups))
	for k, g := range groups {
		watch[k] = health.Group(g)
	}
	reg, err := i.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		snap, err := health.Read(ctx, c, watch, 0)
		now := i.clock.Now()
		for _, s := range snap.Streams {
			for p, v := range s.HighWatermarks {
				o.ObserveInt64(hw, v, metric.WithAttributes(systemAttr, semconv.MessagingDestinationName(s.Name),
					AttrPartition.String(itoa(p))))
			}
		}
		for _, g := range snap.Groups {
			attrs := i.attrs.group(g.Stream, g.Group)
			for _, pl := range g.Lag.Partitions {
				o.ObserveInt64(lag, pl.Lag, metric.WithAttributes(append(base(g.Stream, g.Group),
					AttrPartition.String(itoa(pl.Partition)))...))
			}
			o.ObserveInt64(inflight, g.Inflight, attrs)
			o.ObserveInt64(available, g.Available, attrs)
			o.ObserveInt64(dead, g.DeadLetters, attrs)
			a := 0.0
			if !g.OldestPending.IsZero() {
				a = max(now.Sub(g.OldestPending).Seconds(), 0)
			}
			o.ObserveFloat64(age, a, attrs)
		}
		return err
	}, lag, inflight, available, dead, age, hw)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}
