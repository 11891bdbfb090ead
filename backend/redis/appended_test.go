package redis_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// TestFetchReadsOnlyAppendedPartitions: a caught-up group of a stream of
// 1,024 partitions, of which 4 get new events, reads the streams of those
// 4 only, not the 1,020 with nothing new; a fetch that leaves events
// behind finds them the next time; a replay and a reset, which move
// cursors back, send the next fetch back to every partition.
func TestFetchReadsOnlyAppendedPartitions(t *testing.T) {
	ctx := context.Background()
	// streams returns how many partition streams the first fetch of a
	// group and its third one read, each after 100 new events in
	// partitions 0 to 3 of a stream of parts partitions.
	streams := func(parts int) (first, steady int64) {
		rb, _, c := countedGroup(t, parts)
		for round := range 3 {
			appendN(t, c, "s", 4, 100)
			fetchAck100(t, c)
			n, err := rb.FetchStreams(ctx, "s")
			require.NoError(t, err)
			if round == 0 {
				first = n
			}
			steady = n
		}
		return first, steady
	}
	_, small := streams(4)
	first, wide := streams(1024)
	t.Logf("partition streams a fetch read: 4 partitions %d; 1,024 partitions %d the first time, %d after", small, first, wide)
	require.GreaterOrEqual(t, first, int64(1024), "the first fetch of a group reads every partition")
	// (Each of the 4 is read twice: for its quota of the limit, 1 of 1,024
	// partitions' shares, and then for the rest.)
	require.LessOrEqual(t, wide, 2*small, "a fetch read the streams of partitions with nothing new")

	// A replay moves the cursors back: the next fetch finds the replayed
	// events, in partitions that got nothing new.
	rb, _ := newBackend(t)
	c := rheo.New(rb)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1024}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	appendN(t, c, "s", 1024, 2048) // two events in every partition
	got := 0
	for got < 2048 {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		require.NotEmpty(t, ls, "events left behind by a fetch were not found again (%d of 2048)", got)
		require.NoError(t, c.AckBatch(ctx, ls))
		got += len(ls)
	}
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, ls)
	n, err := c.Replay(ctx, "s", "g", rheo.FromSequence(0), 700)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	ls, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, 700, ls[0].Event.Partition)
	require.NoError(t, c.AckBatch(ctx, ls))

	// So does a reset.
	_, err = c.ResetGroup(ctx, "s", "g", rheo.ResetOptions{Start: rheo.Beginning(), Partitions: []int{3}, Confirm: true})
	require.NoError(t, err)
	ls, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, 3, ls[0].Event.Partition)
}

// TestFetchFromSomePartitionsKeepsTheRestFound: fetches from some
// partitions between fetches from all of them leave nothing unfound.
func TestFetchFromSomePartitionsKeepsTheRestFound(t *testing.T) {
	ctx := context.Background()
	rb, _ := newBackend(t)
	c := rheo.New(rb)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 8}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	appendN(t, c, "s", 8, 8)
	fetch := func(limit int, parts ...int) []rheo.Lease {
		t.Helper()
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: limit, Partitions: parts})
		require.NoError(t, err)
		require.NoError(t, c.AckBatch(ctx, ls))
		return ls
	}
	require.Len(t, fetch(100), 8)
	p5, p6 := 5, 6
	for _, p := range []*int{&p5, &p5, &p5, &p6} {
		_, err := c.Append(ctx, "s", rheo.Message{Type: "t", Partition: p})
		require.NoError(t, err)
	}
	require.Len(t, fetch(1, 5), 1)   // leaves 2 in partition 5
	require.Len(t, fetch(100, 6), 1) // empties partition 6
	ls := fetch(100)
	require.Len(t, ls, 2)
	require.Equal(t, 5, ls[0].Event.Partition)
	require.Len(t, fetch(2), 0)

	// A fetch from all of them that leaves some behind, then one from
	// some that empties those.
	for range 3 {
		_, err := c.Append(ctx, "s", rheo.Message{Type: "t", Partition: &p5})
		require.NoError(t, err)
	}
	require.Len(t, fetch(1), 1)
	require.Len(t, fetch(100, 5), 2)
	require.Len(t, fetch(100), 0)
	_, err := c.Append(ctx, "s", rheo.Message{Type: "t", Partition: &p5})
	require.NoError(t, err)
	require.Len(t, fetch(100), 1)
}

// TestFetchReadsASpreadPartitionOnce: when an append spreads 100 events
// over about 95 of 1,024 partitions, a fetch's share of each is 1 event,
// which most of them have: a fetch of 100 reads each of their streams
// once, not a second time to find it had no more (the partition's last
// event leased is its last appended).
func TestFetchReadsASpreadPartitionOnce(t *testing.T) {
	ctx := context.Background()
	rb, _, c := countedGroup(t, 1024)
	n := 0
	for round := range 4 {
		msgs := make([]rheo.Message, 100)
		parts := map[int]bool{}
		for j := range msgs {
			msgs[j] = rheo.Message{Type: "t", Key: strconv.Itoa(n), Payload: json.RawMessage(`{}`)}
			n++
		}
		evs, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
		for _, e := range evs {
			parts[e.Partition] = true
		}
		fetchAck100(t, c)
		read, err := rb.FetchStreams(ctx, "s")
		require.NoError(t, err)
		t.Logf("round %d: %d partitions appended to, %d streams read", round, len(parts), read)
		if round > 0 { // (the first fetch of a group reads every partition)
			require.LessOrEqual(t, read, int64(len(parts))+10, "streams read again after they gave their last event")
		}
	}
}
