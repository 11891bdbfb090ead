package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// idIndexKeys returns the keys of a stream's ID index: "ids", each bucket
// "idb" lists and "idb" itself, those that exist. It fails the test when a
// listed bucket is missing or a bucket exists that "idb" does not list.
func idIndexKeys(t testing.TB, rc goredis.UniversalClient, base string) []string {
	t.Helper()
	ctx := context.Background()
	listed, err := rc.SMembers(ctx, base+"idb").Result()
	require.NoError(t, err)
	var keys, buckets []string
	for _, bk := range listed {
		buckets = append(buckets, base+"ids:"+bk)
	}
	found, err := rc.Keys(ctx, base+"ids:*").Result()
	require.NoError(t, err)
	slices.Sort(found)
	slices.Sort(buckets)
	require.ElementsMatch(t, buckets, found, "the buckets idb lists are the bucket keys there are")
	for _, k := range []string{base + "ids", base + "idb"} {
		n, err := rc.Exists(ctx, k).Result()
		require.NoError(t, err)
		if n == 1 {
			keys = append(keys, k)
		}
	}
	return append(keys, buckets...)
}

// idIndexFields is the number of IDs the stream's ID index holds, in
// "ids" and in every bucket (idIndexKeys checks the registry on the way).
func idIndexFields(t testing.TB, rc goredis.UniversalClient, base string) int64 {
	t.Helper()
	var n int64
	for _, k := range idIndexKeys(t, rc, base) {
		if k == base+"idb" {
			continue
		}
		m, err := rc.HLen(context.Background(), k).Result()
		require.NoError(t, err)
		n += m
	}
	return n
}

// requireNoKeys fails the test when a key of the stream whose key base is
// base is left.
func requireNoKeys(t testing.TB, rc goredis.UniversalClient, base string) {
	t.Helper()
	left, err := rc.Keys(context.Background(), base+"*").Result()
	require.NoError(t, err)
	require.Empty(t, left, "every key of the stream goes with it")
}

// v7 returns a UUIDv7-shaped ID whose timestamp is ms milliseconds since
// 1970 and whose random part is n.
func v7(ms int64, n int) string {
	h := fmt.Sprintf("%012x", ms)
	return fmt.Sprintf("%s-%s-7000-8000-%012x", h[:8], h[8:], n)
}

// TestIDIndex runs every operation that reads or writes the ID index on
// IDs of several buckets, IDs that are not UUIDv7s and generated ones, on
// a stream of this version (the index in buckets) and on one of earlier
// versions (one hash), and checks where the IDs are kept and that
// retention and deletion remove every key.
func TestIDIndex(t *testing.T) {
	for _, earlier := range []bool{false, true} {
		t.Run(map[bool]string{false: "buckets", true: "earlier_versions"}[earlier], func(t *testing.T) {
			testIDIndex(t, earlier)
		})
	}
}

func testIDIndex(t *testing.T, earlier bool) {
	b, rc := newBackend(t)
	clk := clock.NewFrozen(epoch)
	c := rheo.New(b, rheo.WithClock(clk))
	ctx := context.Background()
	base := b.KeyPrefix() + "{ix}:"
	require.NoError(t, c.CreateStream(ctx, "ix", rheo.StreamConfig{Partitions: 3}))
	require.NoError(t, c.CreateGroup(ctx, "ix", "g", rheo.GroupConfig{MaxAttempts: 1}))
	if earlier {
		// What CreateStream of an earlier version left: no idl.
		require.NoError(t, rc.HDel(ctx, base+"meta", "idl").Err())
	}
	// Three buckets (4,096 ms each), interleaved, with a UUIDv4, a name and
	// generated IDs among them.
	t0 := int64(1_780_000_000_000) &^ 0xfff
	// A UUIDv4 with the first ten characters of a UUIDv7 beside it.
	v4 := v7(t0, 8)[:14] + "4" + v7(t0, 8)[15:]
	ids := []string{
		v7(t0, 1), v4, v7(t0+5000, 2), "order-1", v7(t0+1, 3), v7(t0+9000, 4),
		"4b0e1c2a-9d7e-4f3a-8b1c-2d3e4f5a6b7c", v7(t0+4095, 5), v7(t0+4096, 6),
	}
	msgs := func(ids []string) []rheo.Message {
		ms := make([]rheo.Message, len(ids))
		for i, id := range ids {
			ms[i] = rheo.Message{ID: id, Key: fmt.Sprint(i), Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		}
		return ms
	}
	first, err := c.AppendBatch(ctx, "ix", append(msgs(ids), make([]rheo.Message, 4)...))
	require.NoError(t, err)
	require.Len(t, first, len(ids)+4)
	want := []string{base + "ids", base + "idb",
		base + "ids:" + v7(t0, 0)[:10], base + "ids:" + v7(t0+4096, 0)[:10], base + "ids:" + v7(t0+8192, 0)[:10]}
	for _, e := range first[len(ids):] {
		ids = append(ids, e.ID) // the generated ones
		want = append(want, base+"ids:"+e.ID[:10])
	}
	keys := idIndexKeys(t, rc, base)
	if earlier {
		require.Equal(t, []string{base + "ids"}, keys)
	} else {
		require.Equal(t, dedupe(want), dedupe(keys), "one bucket per 4,096 ms; the UUIDv4s and the name in ids")
		n, err := rc.HLen(ctx, base+"ids").Result()
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		for _, id := range []string{ids[0], ids[1]} {
			got, err := c.Backend().Events(ctx, "ix", []string{id})
			require.NoError(t, err)
			require.Len(t, got, 1, id)
		}
	}
	// An append of one bucket's UUIDv7 and a UUIDv4 of its first ten
	// characters alone (the script's path for a batch of one bucket).
	p0 := 0
	w := v7(t0, 13)
	lone := []rheo.Message{{ID: v7(t0+2, 12), Partition: &p0}, {ID: w[:14] + "4" + w[15:], Partition: &p0}}
	more, err := c.AppendBatch(ctx, "ix", lone)
	require.NoError(t, err)
	first = append(first, more...)
	for _, e := range more {
		ids = append(ids, e.ID)
		got, err := c.Backend().Events(ctx, "ix", []string{e.ID})
		require.NoError(t, err)
		require.Len(t, got, 1, e.ID)
	}
	if !earlier {
		n, err := rc.HLen(ctx, base+"ids").Result()
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
	}

	// Appending them again writes nothing and answers the stored events,
	// new IDs among them taking the next sequences.
	again, err := c.AppendBatch(ctx, "ix", msgs(append([]string{v7(t0+2, 7)}, slices.Concat(ids[:3], []string{"order-2"}, ids[3:])...)))
	require.NoError(t, err)
	require.Len(t, again, len(ids)+2)
	byID := map[string]rheo.Event{}
	for _, e := range first {
		byID[e.ID] = e
	}
	var fresh []rheo.Event
	for _, e := range again {
		if old, ok := byID[e.ID]; ok {
			require.Equal(t, old.Partition, e.Partition, e.ID)
			require.Equal(t, old.Sequence, e.Sequence, e.ID)
		} else {
			fresh = append(fresh, e)
		}
	}
	require.Len(t, fresh, 2)
	st, err := c.Stream(ctx, "ix")
	require.NoError(t, err)
	var total int64
	for _, hw := range st.HighWatermarks {
		total += hw
	}
	require.EqualValues(t, len(ids)+2, total, "the stored IDs took no sequence")
	all := append(slices.Clone(ids), fresh[0].ID, fresh[1].ID)

	// Events finds each, whatever its bucket.
	evs, err := c.Backend().Events(ctx, "ix", append(slices.Clone(all), v7(t0, 99), "nope"))
	require.NoError(t, err)
	require.Len(t, evs, len(all))

	// Fetch, list by ID, renew, then settle across buckets: the fence reads
	// each event's position from its bucket.
	ls, err := c.Fetch(ctx, "ix", "g", rheo.FetchOptions{Limit: 100, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, len(all))
	listed, err := c.Leases(ctx, "ix", "g", rheo.LeaseListOptions{EventIDs: all})
	require.NoError(t, err)
	require.Len(t, listed, len(all))
	for i := range ls {
		ls[i], err = c.Renew(ctx, ls[i], time.Minute)
		require.NoError(t, err)
	}
	var dead []string
	var acks []rheo.Lease
	for i, l := range ls {
		if i%3 == 0 {
			require.NoError(t, c.Reject(ctx, l, "bad"))
			dead = append(dead, l.Event.ID)
		} else {
			acks = append(acks, l)
		}
	}
	require.NoError(t, c.AckBatch(ctx, acks))
	// A stale copy of a lease is fenced.
	require.ErrorIs(t, c.Ack(ctx, acks[0]), rheo.ErrStaleLease)

	// Dead letters page by an event ID's cursor; a redrive by IDs finds them.
	page, err := c.DeadLetters(ctx, "ix", "g", rheo.DeadLetterOptions{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	rest, err := c.DeadLetters(ctx, "ix", "g", rheo.DeadLetterOptions{After: page[1].Event.ID})
	require.NoError(t, err)
	require.Len(t, rest, len(dead)-2)
	n, err := c.Redrive(ctx, "ix", "g", dead...)
	require.NoError(t, err)
	require.Equal(t, len(dead), n)
	ls, err = c.Fetch(ctx, "ix", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, len(dead))
	require.NoError(t, c.AckBatch(ctx, ls))
	lag, err := c.Lag(ctx, "ix", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)

	// Trimming every event empties the index: no bucket, no registry.
	rep, err := c.Trim(ctx, "ix", rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 1}})
	require.NoError(t, err)
	require.EqualValues(t, len(all)-3, rep.Removed, "one event kept per partition")
	require.EqualValues(t, 3, idIndexFields(t, rc, base), "the kept events' IDs alone")
	evs, err = c.Backend().Events(ctx, "ix", all)
	require.NoError(t, err)
	require.Len(t, evs, 3)

	require.NoError(t, c.DeleteStream(ctx, "ix", rheo.DeleteOptions{Confirm: true}))
	requireNoKeys(t, rc, base)
}

func dedupe(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// TestIDIndexOfEarlierVersionsWriters: a process of an earlier version
// appending to a stream with buckets puts its IDs in "ids". This version
// finds them there: it answers them as stored, settles their leases and
// trims them.
func TestIDIndexOfEarlierVersionsWriters(t *testing.T) {
	b, rc := newBackend(t)
	clk := clock.NewFrozen(epoch)
	c := rheo.New(b, rheo.WithClock(clk))
	ctx := context.Background()
	base := b.KeyPrefix() + "{mv}:"
	require.NoError(t, c.CreateStream(ctx, "mv", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, c.CreateGroup(ctx, "mv", "g", rheo.GroupConfig{}))
	t0 := int64(1_780_000_000_000)
	var ids []string
	for i := range 6 {
		ids = append(ids, v7(t0+int64(i)*5000, i))
	}
	first, err := c.AppendBatch(ctx, "mv", []rheo.Message{{ID: ids[0]}, {ID: ids[1]}, {ID: ids[2]}, {ID: ids[3]}, {ID: ids[4]}, {ID: ids[5]}})
	require.NoError(t, err)
	// What an earlier version's append wrote for the first four: "ids".
	for _, e := range first[:4] {
		bk := base + "ids:" + e.ID[:10]
		at, err := rc.HGet(ctx, bk, e.ID).Result()
		require.NoError(t, err)
		require.NoError(t, rc.HDel(ctx, bk, e.ID).Err())
		require.NoError(t, rc.SRem(ctx, base+"idb", e.ID[:10]).Err())
		require.NoError(t, rc.HSet(ctx, base+"ids", e.ID, at).Err())
	}
	again, err := c.AppendBatch(ctx, "mv", []rheo.Message{{ID: ids[5]}, {ID: ids[0]}, {ID: ids[3]}, {ID: "fresh-1"}})
	require.NoError(t, err)
	require.Equal(t, first[5].Sequence, again[0].Sequence)
	require.Equal(t, first[0].Sequence, again[1].Sequence)
	require.Equal(t, first[3].Sequence, again[2].Sequence)
	evs, err := c.Backend().Events(ctx, "mv", ids)
	require.NoError(t, err)
	require.Len(t, evs, 6)
	ls, err := c.Fetch(ctx, "mv", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 7)
	listed, err := c.Leases(ctx, "mv", "g", rheo.LeaseListOptions{EventIDs: ids[:2]})
	require.NoError(t, err)
	require.Len(t, listed, 2)
	_, err = c.Renew(ctx, ls[0], time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.AckBatch(ctx, ls))
	lag, err := c.Lag(ctx, "mv", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
	_, err = c.Trim(ctx, "mv", rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 1}})
	require.NoError(t, err)
	n, err := rc.HLen(ctx, base+"ids").Result()
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(2), "trimmed IDs leave ids too; at most the two kept events' remain")
	require.NoError(t, c.DeleteStream(ctx, "mv", rheo.DeleteOptions{Confirm: true}))
	requireNoKeys(t, rc, base)
}

// TestDeleteStreamOfManyBuckets: deleting a stream whose IDs fill 2,500
// buckets removes them in several calls, and a stream created again under
// the name starts with an empty index, also when the deletion stopped
// before its buckets were gone (here: as an earlier version's deletion
// leaves them).
func TestDeleteStreamOfManyBuckets(t *testing.T) {
	b, rc := newBackend(t)
	c := rheo.New(b)
	ctx := context.Background()
	base := b.KeyPrefix() + "{many}:"
	msgs := make([]rheo.Message, 2500)
	t0 := int64(1_780_000_000_000)
	for i := range msgs {
		msgs[i] = rheo.Message{ID: v7(t0+int64(i)*4096, i)}
	}
	fill := func() {
		require.NoError(t, c.CreateStream(ctx, "many", rheo.StreamConfig{Partitions: 2}))
		evs, err := c.AppendBatch(ctx, "many", msgs)
		require.NoError(t, err)
		for i, e := range evs {
			require.NotZero(t, e.Sequence)
			require.Equal(t, msgs[i].ID, e.ID)
		}
		n, err := rc.SCard(ctx, base+"idb").Result()
		require.NoError(t, err)
		require.EqualValues(t, 2500, n)
		st, err := c.Stream(ctx, "many")
		require.NoError(t, err)
		require.EqualValues(t, 2500, st.HighWatermarks[0]+st.HighWatermarks[1], "no ID was taken for stored")
	}
	fill()
	require.NoError(t, c.DeleteStream(ctx, "many", rheo.DeleteOptions{Confirm: true}))
	requireNoKeys(t, rc, base)

	// An earlier version's deletion: every key but the buckets and idb.
	fill()
	for _, k := range []string{"meta", "hw", "ids", "groups", "trimmed", "s:0", "s:1"} {
		require.NoError(t, rc.Unlink(ctx, base+k).Err())
	}
	require.NoError(t, rc.HDel(ctx, b.KeyPrefix()+"streams", "many").Err())
	fill() // the same IDs are new to the stream made again
	require.NoError(t, c.DeleteStream(ctx, "many", rheo.DeleteOptions{Confirm: true}))
	requireNoKeys(t, rc, base)
}
