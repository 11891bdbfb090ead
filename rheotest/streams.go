package rheotest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func runStreams(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"ping_and_migrate_are_repeatable", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			require.NoError(t, e.c.Ping(e.ctx))
			require.NoError(t, e.c.Migrate(e.ctx))
			require.NoError(t, e.c.Migrate(e.ctx))
			require.NoError(t, e.c.Ping(e.ctx))
		}},
		{"create_stream_twice_is_already_exists", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			err := e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Partitions: 3})
			require.ErrorIs(t, err, rheo.ErrAlreadyExists)
			streams, err := e.c.ListStreams(e.ctx)
			require.NoError(t, err)
			require.Len(t, streams, 1)
			require.Equal(t, 2, streams[0].Partitions, "the failed create must not change the stream")
		}},
		{"list_streams_sorted_with_partitions_and_created_at", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			base := Name("s")
			for _, suffix := range []string{"c", "a", "b"} {
				require.NoError(t, e.c.CreateStream(e.ctx, base+"-"+suffix, rheo.StreamConfig{}))
				e.clk.Advance(time.Second)
			}
			streams, err := e.c.ListStreams(e.ctx)
			require.NoError(t, err)
			require.Len(t, streams, 3)
			for i, want := range []string{"a", "b", "c"} {
				require.Equal(t, base+"-"+want, streams[i].Name)
				require.Equal(t, 1, streams[i].Partitions, "zero partitions means one")
			}
			// "a" was created second, one second after Epoch.
			require.True(t, streams[0].CreatedAt.Equal(Epoch.Add(time.Second)), "CreatedAt %v", streams[0].CreatedAt)
			require.Equal(t, time.UTC, streams[0].CreatedAt.Location())
		}},
		{"empty_store_lists_no_streams", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			streams, err := e.c.ListStreams(e.ctx)
			require.NoError(t, err)
			require.Empty(t, streams)
		}},
	})
}

func runAppend(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"batch_gets_sequences_1_2_3", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{
				{Type: "a", Payload: json.RawMessage(`{"i":1}`)},
				{Type: "b", Payload: json.RawMessage(`{"i":2}`)},
				{Type: "c"},
			})
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2, 3}, seqs(evs))
			for i, ev := range evs {
				require.Equal(t, s, ev.Stream)
				require.Equal(t, 0, ev.Partition)
				require.NotEmpty(t, ev.ID, "a generated ID")
				require.Equal(t, string(rune('a'+i)), ev.Type)
				require.True(t, ev.Timestamp.Equal(Epoch), "timestamp defaults to the client clock")
			}
			require.JSONEq(t, `{}`, string(evs[2].Payload), "empty payload means {}")
			require.NotEqual(t, evs[0].ID, evs[1].ID)
			requireSameEvents(t, evs, e.readAll(s, 0))
		}},
		{"sequences_continue_across_appends", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			a := e.appendN(s, 0, 2)
			b, err := e.c.Append(e.ctx, s, rheo.Message{Type: "x"})
			require.NoError(t, err)
			c := e.appendN(s, 0, 2)
			require.Equal(t, []int64{1, 2}, seqs(a))
			require.Equal(t, int64(3), b.Sequence)
			require.Equal(t, []int64{4, 5}, seqs(c))
		}},
		{"batch_keeps_input_order_across_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			order := []int{2, 0, 2, 1, 0, 2}
			ms := make([]rheo.Message, len(order))
			for i, p := range order {
				ms[i] = msg(p, i)
			}
			evs, err := e.c.AppendBatch(e.ctx, s, ms)
			require.NoError(t, err)
			want := []pos{{2, 1}, {0, 1}, {2, 2}, {1, 1}, {0, 2}, {2, 3}}
			require.Equal(t, want, eventPositions(evs))
			for i, ev := range evs {
				require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(ev.Payload), "event %d keeps its payload", i)
			}
		}},
		{"routing_explicit_partition_wins_over_key", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(8)
			for _, key := range []string{"a", "b", "cust-1", "order-42"} {
				want := (fnvPartition(key, 8) + 3) % 8 // never the key's own partition
				ev, err := e.c.Append(e.ctx, s, rheo.Message{Key: key, Partition: ptr(want)})
				require.NoError(t, err)
				require.Equal(t, want, ev.Partition, "key %q", key)
				require.Equal(t, key, ev.Key)
			}
		}},
		{"routing_key_is_fnv1a_32_mod_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(7)
			for i := range 40 {
				key := fmt.Sprintf("key-%d-ü", i)
				ev, err := e.c.Append(e.ctx, s, rheo.Message{Key: key})
				require.NoError(t, err)
				require.Equal(t, fnvPartition(key, 7), ev.Partition, "key %q", key)
			}
		}},
		{"routing_without_key_or_partition_is_zero", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(4)
			for range 5 {
				ev, err := e.c.Append(e.ctx, s, rheo.Message{})
				require.NoError(t, err)
				require.Equal(t, 0, ev.Partition)
			}
			for p := 1; p < 4; p++ {
				require.Empty(t, e.readAll(s, p))
			}
		}},
		{"same_key_same_partition_consecutive_sequences", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			a, err := e.c.Append(e.ctx, s, rheo.Message{Key: "account-7"})
			require.NoError(t, err)
			b, err := e.c.Append(e.ctx, s, rheo.Message{Key: "account-7"})
			require.NoError(t, err)
			require.Equal(t, a.Partition, b.Partition)
			require.Equal(t, a.Sequence+1, b.Sequence)
		}},
		{"explicit_partition_out_of_range_is_invalid_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			before := e.snapshot()
			for _, p := range []int{3, 99, -1} {
				_, err := e.c.Append(e.ctx, s, rheo.Message{Partition: ptr(p)})
				require.ErrorIs(t, err, rheo.ErrInvalidPartition, "partition %d", p)
			}
			require.Equal(t, before, e.snapshot())
		}},
		{"batch_with_one_bad_partition_writes_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 1)
			before := e.snapshot()
			_, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{msg(0, 1), msg(1, 2), msg(2, 3)})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			require.Equal(t, before, e.snapshot())
			evs := e.appendN(s, 0, 1)
			require.Equal(t, int64(2), evs[0].Sequence, "the failed batch consumed no sequence")
		}},
		{"batch_with_one_bad_payload_writes_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			before := e.snapshot()
			bad := msg(1, 2)
			bad.Payload = json.RawMessage(`[1,2]`)
			_, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{msg(0, 1), bad, msg(1, 3)})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			require.Equal(t, before, e.snapshot())
		}},
		{"reappending_an_id_returns_the_stored_event_and_writes_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			first, err := e.c.Append(e.ctx, s, rheo.Message{ID: "order-1", Type: "created", Key: "k", Payload: json.RawMessage(`{"v":1}`)})
			require.NoError(t, err)
			before := e.snapshot()
			e.clk.Advance(time.Minute)
			again, err := e.c.Append(e.ctx, s, rheo.Message{ID: "order-1", Type: "other", Partition: ptr(1), Payload: json.RawMessage(`{"v":2}`)})
			require.NoError(t, err)
			requireSameEvent(t, first, again)
			require.Equal(t, before, e.snapshot())
		}},
		{"batch_mixing_stored_and_new_ids_writes_only_new", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			old, err := e.c.Append(e.ctx, s, rheo.Message{ID: "e-1", Payload: json.RawMessage(`{"v":1}`)})
			require.NoError(t, err)
			evs, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{
				{ID: "e-2"}, {ID: "e-1", Payload: json.RawMessage(`{"v":9}`)}, {ID: "e-3"},
			})
			require.NoError(t, err)
			require.Equal(t, []string{"e-2", "e-1", "e-3"}, ids(evs))
			requireSameEvent(t, old, evs[1])
			require.Equal(t, []int64{2, 1, 3}, seqs(evs))
			require.Equal(t, []string{"e-1", "e-2", "e-3"}, ids(e.readAll(s, 0)))
		}},
		{"concurrent_appends_of_one_id_store_one_event", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			const writers = 8
			got := make([]rheo.Event, writers)
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					got[w], errs[w] = e.c.Append(e.ctx, s, rheo.Message{ID: "once", Key: fmt.Sprint(w), Payload: json.RawMessage(fmt.Sprintf(`{"w":%d}`, w))})
				})
			}
			wg.Wait()
			for w := range writers {
				require.NoError(t, errs[w])
				requireSameEvent(t, got[0], got[w])
			}
			stored := append(e.readAll(s, 0), e.readAll(s, 1)...)
			require.Len(t, stored, 1)
			requireSameEvent(t, got[0], stored[0])
		}},
		{"same_id_in_two_streams_is_two_events", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s1, s2 := e.stream(1), e.stream(1)
			a, err := e.c.Append(e.ctx, s1, rheo.Message{ID: "shared", Type: "one"})
			require.NoError(t, err)
			b, err := e.c.Append(e.ctx, s2, rheo.Message{ID: "shared", Type: "two"})
			require.NoError(t, err)
			require.Equal(t, s1, a.Stream)
			require.Equal(t, s2, b.Stream)
			require.Equal(t, "two", b.Type)
		}},
		{"payload_metadata_and_timestamp_round_trip", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			zone := time.FixedZone("X", 5*3600)
			ts := time.Date(2029, 5, 6, 7, 8, 9, 123456789, zone)
			ev, err := e.c.Append(e.ctx, s, rheo.Message{
				Type: "priced", Key: "k-1",
				Payload:   json.RawMessage(`{ "price" : 2.913, "nested": {"a": [1, "x", null]}, "ok": true }`),
				Metadata:  map[string]string{rheo.MetaCorrelationID: "abc", rheo.MetaProducer: "svc", "empty": ""},
				Timestamp: ts,
			})
			require.NoError(t, err)
			want := ts.UTC().Truncate(time.Microsecond)
			require.True(t, ev.Timestamp.Equal(want), "timestamp %v, want %v", ev.Timestamp, want)
			read := e.readAll(s, 0)
			require.Len(t, read, 1)
			requireSameEvent(t, ev, read[0])
			require.True(t, read[0].Timestamp.Equal(want), "stored timestamp keeps microseconds: %v", read[0].Timestamp)
			require.Equal(t, time.UTC, read[0].Timestamp.Location(), "times come back in UTC")
			require.JSONEq(t, `{"price":2.913,"nested":{"a":[1,"x",null]},"ok":true}`, string(read[0].Payload))
			require.Equal(t, "abc", read[0].Metadata[rheo.MetaCorrelationID])
			require.Equal(t, "svc", read[0].Metadata[rheo.MetaProducer])
		}},
		{"empty_metadata_is_none", func(t *testing.T, f Factory) {
			// nil and an empty map both come back as nil, from the append
			// and from every read, so that e.Metadata == nil means the same
			// on every store.
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			evs, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{{Metadata: map[string]string{}}, {}})
			require.NoError(t, err)
			read := e.readAll(s, 0)
			require.Len(t, read, 2)
			queried, err := e.c.Query(e.ctx, rheo.Query{Stream: s})
			require.NoError(t, err)
			require.Len(t, queried, 2)
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 2})
			require.Len(t, ls, 2)
			for i := range 2 {
				require.Nil(t, evs[i].Metadata, "appended event %d", i)
				require.Nil(t, read[i].Metadata, "read event %d", i)
				require.Nil(t, queried[i].Metadata, "queried event %d", i)
				require.Nil(t, ls[i].Event.Metadata, "leased event %d", i)
			}
		}},
		{"read_pages_by_after_and_limit_and_never_consumes", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			evs := e.appendN(s, 1, 3)
			g := e.group(s, rheo.GroupConfig{})
			first, err := e.c.Read(e.ctx, s, rheo.ReadOptions{Partition: 1, Limit: 2})
			require.NoError(t, err)
			requireSameEvents(t, evs[:2], first)
			rest, err := e.c.Read(e.ctx, s, rheo.ReadOptions{Partition: 1, After: 2})
			require.NoError(t, err)
			requireSameEvents(t, evs[2:], rest)
			none, err := e.c.Read(e.ctx, s, rheo.ReadOptions{Partition: 0})
			require.NoError(t, err)
			require.Empty(t, none)
			require.Len(t, e.fetch(s, g, rheo.FetchOptions{Limit: 10}), 3, "reading consumed nothing")
		}},
		{"concurrent_appends_get_contiguous_sequences", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			const writers, each = 8, 25
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						if i%5 == 0 {
							if _, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{msg(0, w), msg(0, w)}); err != nil {
								errs <- err
								return
							}
							continue
						}
						if _, err := e.c.Append(e.ctx, s, msg(0, w)); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			all := e.readAll(s, 0)
			require.Len(t, all, writers*(each+each/5))
			for i, ev := range all {
				require.Equal(t, int64(i+1), ev.Sequence)
			}
		}},
	})
}

// fnvPartition is the routing rule of R1, computed independently of rheo:
// FNV-1a 32 of the key's UTF-8 bytes, modulo the partition count.
func fnvPartition(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}
