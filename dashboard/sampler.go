package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/rheo-go/rheo"
)

// maxSamples bounds the lag history kept per group (an hour at the default
// 10s interval).
const maxSamples = 360

// sample is one lag observation of a group.
type sample struct {
	At  time.Time
	Lag int64
}

// series is what the dashboard remembers of one group while it runs.
type series struct {
	samples      []sample
	frontier     int64 // sum of the partitions' frontiers at the last sample
	seen         bool
	lastProgress time.Time // last time the frontier moved or the lag was 0
}

// sampler keeps every group's lag history. Only the dashboard's own
// observations go in: nothing is stored in the backend.
type sampler struct {
	stuckAfter time.Duration
	mu         sync.Mutex
	groups     map[[2]string]*series
}

func newSampler(stuckAfter time.Duration) *sampler {
	return &sampler{stuckAfter: stuckAfter, groups: map[[2]string]*series{}}
}

// record adds an observation of lag at now. Observations less than a second
// apart share one slot (the latest lag wins), so that page views and refreshes do not crowd
// out the history.
func (s *sampler) record(lag rheo.Lag, now time.Time) {
	var frontier int64
	for _, p := range lag.Partitions {
		frontier += p.Frontier
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{lag.Stream, lag.Group}
	g := s.groups[k]
	if g == nil {
		g = &series{}
		s.groups[k] = g
	}
	if !g.seen || frontier != g.frontier || lag.Total == 0 {
		g.lastProgress = now
	}
	g.seen, g.frontier = true, frontier
	if n := len(g.samples); n > 0 && now.Sub(g.samples[n-1].At) < time.Second {
		g.samples[n-1].Lag = lag.Total // keep the slot's time: one sample a second at most
		return
	}
	if len(g.samples) == maxSamples {
		copy(g.samples, g.samples[1:])
		g.samples = g.samples[:maxSamples-1]
	}
	g.samples = append(g.samples, sample{At: now, Lag: lag.Total})
}

// history returns a copy of the group's samples, oldest first.
func (s *sampler) history(stream, group string) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[[2]string{stream, group}]
	if g == nil {
		return nil
	}
	return append([]sample(nil), g.samples...)
}

// stalledFor reports how long the group's frontier has not moved while it
// had lag, as observed by the dashboard (0 when it moved at the last sample).
func (s *sampler) stalledFor(stream, group string, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[[2]string{stream, group}]
	if g == nil {
		return 0
	}
	return max(now.Sub(g.lastProgress), 0)
}

// sampleLoop samples every group's lag each interval until Close.
func (d *Dashboard) sampleLoop() {
	defer close(d.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-d.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(d.cfg.sampleInterval)
	defer t.Stop()
	for {
		d.sampleAll(ctx)
		select {
		case <-t.C:
		case <-d.stop:
			return
		}
	}
}

// sampleAll records one lag sample of every group; errors are logged at
// debug level and retried at the next tick.
func (d *Dashboard) sampleAll(ctx context.Context) {
	streams, err := d.c.ListStreams(ctx)
	if err != nil {
		d.log.DebugContext(ctx, "dashboard: sampling lag", "err", err)
		return
	}
	for _, st := range streams {
		groups, err := d.c.ListGroups(ctx, st.Name)
		if err != nil {
			d.log.DebugContext(ctx, "dashboard: sampling lag", "stream", st.Name, "err", err)
			continue
		}
		for _, g := range groups {
			lag, err := d.c.Lag(ctx, st.Name, g)
			if err != nil {
				d.log.DebugContext(ctx, "dashboard: sampling lag", "stream", st.Name, "group", g, "err", err)
				continue
			}
			d.series.record(lag, d.cfg.clock.Now())
		}
	}
}
