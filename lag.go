package rheo

import (
	"context"
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
// partitions, or those given) and their total. A read of given partitions
// costs what they do, however many the stream holds.
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
	got, err := c.b.Lag(ctx, stream, group, parts)
	if err != nil {
		return Lag{}, err
	}
	if parts != nil && len(got) < len(parts) {
		// The cached count was out of date: another process made the
		// stream again with fewer partitions.
		c.streams.Delete(stream)
		n, _, err := c.cachedPartitionCount(ctx, stream)
		if err != nil {
			return Lag{}, err
		}
		p := parts[len(parts)-1]
		for i, pl := range got {
			if pl.Partition != parts[i] {
				p = parts[i]
				break
			}
		}
		return Lag{}, Errorf(ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, stream, n)
	}
	// The backend's slice is the result: each row gets its Lag in place.
	lag := Lag{Stream: stream, Group: group, Partitions: got}
	for i := range got {
		pl := &got[i]
		pl.Lag = max(pl.HighWatermark-pl.Frontier, 0)
		lag.Total += pl.Lag
	}
	if lag.Partitions == nil {
		lag.Partitions = []PartitionLag{}
	}
	return lag, nil
}
