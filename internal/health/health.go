// Package health reads the health of a store's streams and groups (high
// watermarks, lag, leases, dead letters, oldest pending event) for the
// OpenTelemetry gauges of rheotel and the Prometheus exporter, so both report
// the same numbers from the same calls.
package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rheo-go/rheo"
)

// Group names one consumer group.
type Group struct{ Stream, Group string }

// Stream is a stream's high watermark per partition (index = partition).
type Stream struct {
	Name           string
	HighWatermarks []int64
}

// Snapshot is what one read found.
type Snapshot struct {
	Streams []Stream
	Groups  []rheo.GroupInfo
}

// DefaultConcurrency is how many groups are read at once.
const DefaultConcurrency = 8

// Read reads the streams of groups and every group's GroupInfo (one
// GroupInfo per group, never a scan of events), or, when groups is empty,
// those of every stream and group of the store. Groups are read
// concurrency at a time. A group or stream that fails is left out and its
// error joined into the returned error; the rest is still returned.
func Read(ctx context.Context, c *rheo.Client, groups []Group, concurrency int) (Snapshot, error) {
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	var errs []error
	var streams []string
	if len(groups) == 0 {
		infos, err := c.ListStreams(ctx)
		if err != nil {
			return Snapshot{}, fmt.Errorf("list streams: %w", err)
		}
		for _, s := range infos {
			streams = append(streams, s.Name)
			gs, err := c.ListGroups(ctx, s.Name)
			if err != nil {
				errs = append(errs, fmt.Errorf("list groups of stream %q: %w", s.Name, err))
				continue
			}
			for _, g := range gs {
				groups = append(groups, Group{s.Name, g})
			}
		}
	} else {
		for _, g := range groups {
			if !slices.Contains(streams, g.Stream) {
				streams = append(streams, g.Stream)
			}
		}
	}
	var snap Snapshot
	for _, s := range streams {
		st, err := c.Backend().Stream(ctx, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %q: %w", s, err))
			continue
		}
		snap.Streams = append(snap.Streams, Stream{Name: s, HighWatermarks: st.HighWatermarks})
	}

	// Each stream's groups are read in up to concurrency chunks, each by
	// one GroupInfos call (which reads what the groups share once), and
	// concurrency chunks at a time.
	infos := make([]rheo.GroupInfo, len(groups))
	gerrs := make([]error, len(groups))
	byStream := map[string][]int{}
	for i, g := range groups {
		byStream[g.Stream] = append(byStream[g.Stream], i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, concurrency)
	for _, s := range streams {
		idx := byStream[s]
		size := max((len(idx)+concurrency-1)/concurrency, 1)
		for chunk := range slices.Chunk(idx, size) {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				names := make([]string, len(chunk))
				for j, i := range chunk {
					names[j] = groups[i].Group
				}
				is, es := c.GroupInfos(ctx, s, names)
				for j, i := range chunk {
					infos[i] = is[j]
					if es[j] != nil {
						gerrs[i] = fmt.Errorf("group %q of stream %q: %w", groups[i].Group, groups[i].Stream, es[j])
					}
				}
			})
		}
	}
	wg.Wait()
	for i := range groups {
		if gerrs[i] != nil {
			errs = append(errs, gerrs[i])
			continue
		}
		snap.Groups = append(snap.Groups, infos[i])
	}
	return snap, errors.Join(errs...)
}
