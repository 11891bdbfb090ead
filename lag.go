package rheo

import (
	"context"
	"slices"
)

// Lag is a group's honest progress: measured from the committed frontier, never
// from the highest acked sequence.
type Lag struct {
	Stream, Group string
	Partitions    []PartitionLag
	// Total is the sum of Lag over Partitions.
	Total int64
}

// PartitionLag is one partition's progress.
type PartitionLag struct {
	Partition int
	// Frontier is the highest sequence F such that every sequence of the
	// group through F is acked or dead-lettered.
	Frontier int64
	// HighWatermark is the partition's last sequence.
	HighWatermark int64
	// Lag is HighWatermark - Frontier, never negative.
	Lag int64
}

// Lag reports the group's frontier, high watermark and lag per partition (all
// partitions, or those given) and their total.
func (c *Client) Lag(ctx context.Context, stream, group string, partitions ...int) (Lag, error) {
	if err := c.check(); err != nil {
		return Lag{}, err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return Lag{}, err
	}
	var parts []int // (with none given: nil, every partition the store has)
	_, err := c.checkPartitions(ctx, stream, func(n int) (err error) {
		if len(partitions) > 0 {
			parts, err = scope(stream, partitions, n)
		}
		return err
	})
	if err != nil {
		return Lag{}, err
	}
	all, err := c.b.Lag(ctx, stream, group)
	if err != nil {
		return Lag{}, err
	}
	for _, p := range parts {
		if p >= len(all) {
			// The cached count was out of date: another process made
			// the stream again with fewer partitions.
			c.streams.Delete(stream)
			return Lag{}, Errorf(ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, stream, len(all))
		}
	}
	lag := Lag{Stream: stream, Group: group, Partitions: make([]PartitionLag, 0, len(all))}
	for _, pl := range all {
		if parts != nil {
			if _, ok := slices.BinarySearch(parts, pl.Partition); !ok {
				continue
			}
		}
		pl.Lag = max(pl.HighWatermark-pl.Frontier, 0)
		lag.Total += pl.Lag
		lag.Partitions = append(lag.Partitions, pl)
	}
	return lag, nil
}
