package rheotest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// market appends a small market-data stream over two partitions:
//
//	i  p  seq type   key   ts     payload
//	0  0  1   quote  EUR   +0s    {"currency":"EUR","price":2.913,"curve":{"name":"ois","tenor":2},"live":true}
//	1  1  1   quote  USD   +1s    {"currency":"USD","price":1,"curve":{"name":"libor","tenor":2.5},"live":false}
//	2  0  2   trade  EUR   +2s    {"currency":"EUR","price":3,"curve":{"name":"ois","tenor":10},"live":true,"note":null}
//	3  1  2   quote  GBP   +3s    {"currency":"GBP","price":2,"curve":{"name":"ois","tenor":2}}
//	4  0  3   trade  USD   +4s    {"currency":"USD","price":2.0,"live":false}
//
// Metadata: correlation_id "abc" on 0 and 2, producer "pricer" on all but 4.
func market(t *testing.T, e *env) (string, []rheo.Event) {
	t.Helper()
	s := e.stream(2)
	rows := []struct {
		p            int
		typ, key, pl string
		meta         map[string]string
	}{
		{0, "quote", "EUR", `{"currency":"EUR","price":2.913,"curve":{"name":"ois","tenor":2},"live":true}`, map[string]string{rheo.MetaCorrelationID: "abc", rheo.MetaProducer: "pricer"}},
		{1, "quote", "USD", `{"currency":"USD","price":1,"curve":{"name":"libor","tenor":2.5},"live":false}`, map[string]string{rheo.MetaProducer: "pricer"}},
		{0, "trade", "EUR", `{"currency":"EUR","price":3,"curve":{"name":"ois","tenor":10},"live":true,"note":null}`, map[string]string{rheo.MetaCorrelationID: "abc", rheo.MetaProducer: "pricer"}},
		{1, "quote", "GBP", `{"currency":"GBP","price":2,"curve":{"name":"ois","tenor":2}}`, map[string]string{rheo.MetaProducer: "pricer"}},
		{0, "trade", "USD", `{"currency":"USD","price":2.0,"live":false}`, nil},
	}
	evs := make([]rheo.Event, len(rows))
	for i, r := range rows {
		ev, err := e.c.Append(e.ctx, s, rheo.Message{
			Type: r.typ, Key: r.key, Partition: ptr(r.p), Payload: json.RawMessage(r.pl), Metadata: r.meta,
			Timestamp: Epoch.Add(time.Duration(i) * time.Second),
		})
		require.NoError(t, err)
		evs[i] = ev
	}
	return s, evs
}

// pick returns evs at the given indexes.
func pick(evs []rheo.Event, idx ...int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = evs[j].ID
	}
	return out
}

func runQuery(t *testing.T, f Factory) {
	// q runs a query of s and returns the matching IDs in order.
	q := func(t *testing.T, e *env, query rheo.Query) []string {
		t.Helper()
		evs, err := e.c.Query(e.ctx, query)
		require.NoError(t, err)
		return ids(evs)
	}
	runCases(t, f, []testCase{
		{"default_order_is_sequence_then_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 0, 1, 2, 3, 4), q(t, e, rheo.Query{Stream: s}))
			got, err := e.c.Query(e.ctx, rheo.Query{Stream: s})
			require.NoError(t, err)
			requireSameEvents(t, []rheo.Event{evs[0], evs[1], evs[2], evs[3], evs[4]}, got)
		}},
		{"filter_by_type_and_payload_field", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 0), q(t, e, rheo.Query{Stream: s, Type: "quote", Payload: map[string]any{"currency": "EUR"}}))
			require.Equal(t, pick(evs, 0, 1, 3), q(t, e, rheo.Query{Stream: s, Type: "quote"}))
		}},
		{"filter_by_key_and_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 1, 4), q(t, e, rheo.Query{Stream: s, Key: "USD"}))
			require.Equal(t, pick(evs, 4), q(t, e, rheo.Query{Stream: s, Key: "USD", Partitions: []int{0}}))
			require.Equal(t, pick(evs, 1, 3), q(t, e, rheo.Query{Stream: s, Partitions: []int{1}}))
		}},
		{"filter_by_metadata", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 0, 2), q(t, e, rheo.Query{Stream: s, Metadata: map[string]string{rheo.MetaCorrelationID: "abc"}}))
			require.Equal(t, pick(evs, 0, 1, 2, 3), q(t, e, rheo.Query{Stream: s, Metadata: map[string]string{rheo.MetaProducer: "pricer"}}))
			require.Equal(t, pick(evs, 2), q(t, e, rheo.Query{Stream: s, Type: "trade", Metadata: map[string]string{rheo.MetaCorrelationID: "abc", rheo.MetaProducer: "pricer"}}))
			require.Empty(t, q(t, e, rheo.Query{Stream: s, Metadata: map[string]string{rheo.MetaCorrelationID: "abd"}}))
		}},
		{"payload_dotted_paths_reach_nested_objects", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 0, 2, 3), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"curve.name": "ois"}}))
			require.Equal(t, pick(evs, 0, 3), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"curve.name": "ois", "curve.tenor": 2}}))
			require.Equal(t, pick(evs, 1), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"curve.tenor": 2.5}}))
			require.Empty(t, q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"curve.name.x": "ois"}}))
		}},
		{"payload_numbers_bools_and_null", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 0), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"price": 2.913}}))
			require.Equal(t, pick(evs, 3, 4), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"price": 2}}), "2 and 2.0 are the same number")
			require.Equal(t, pick(evs, 3, 4), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"price": 2.0}}))
			require.Equal(t, pick(evs, 1), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"price": int64(1)}}))
			require.Equal(t, pick(evs, 0, 2), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"live": true}}))
			require.Equal(t, pick(evs, 1, 4), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"live": false}}))
			require.Equal(t, pick(evs, 2), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"note": nil}}), "null matches an explicit null only")
			require.Empty(t, q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"price": "2"}}), "a string never equals a number")
			require.Empty(t, q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"live": "true"}}))
		}},
		{"payload_numbers_compare_as_decimals", func(t *testing.T, f Factory) {
			// A filter's number is the decimal it prints as (an int64's
			// digits, a float64's shortest form); a stored number equals it
			// when their decimal values are equal, whatever their spelling.
			// Digits beyond a float64's precision count.
			e := newEnv(t, f)
			s := e.stream(1)
			stored := []string{`1`, `1.0`, `1e0`, `10E-1`, `1.0000000000000001`, `0.1`, `0.1000000000000000001`,
				`1e-400`, `0`, `-0`, `0.0e5`, `100`, `100.000000000000000001`, `1e400`, `5e-324`,
				`4.9406564584124654e-324`, `0.30000000000000004`, `"1"`, `[1]`, `{"b":1}`}
			evs := make([]rheo.Event, len(stored))
			for i, v := range stored {
				ev, err := e.c.Append(e.ctx, s, rheo.Message{Payload: json.RawMessage(`{"a":` + v + `}`)})
				require.NoError(t, err)
				evs[i] = ev
			}
			for _, c := range []struct {
				want any
				idx  []int
			}{
				{1, []int{0, 1, 2, 3}},
				{1.0, []int{0, 1, 2, 3}},
				{json.Number("1.00"), []int{0, 1, 2, 3}},
				{0.1, []int{5}},
				{0, []int{8, 9, 10}},
				{100, []int{11}},
				{5e-324, []int{14}},
				{0.30000000000000004, []int{16}},
				{0.3, []int{}},
			} {
				require.Equal(t, pick(evs, c.idx...), q(t, e, rheo.Query{Stream: s, Payload: map[string]any{"a": c.want}}), "a = %v", c.want)
			}
		}},
		{"time_window_is_inclusive", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 1, 2, 3), q(t, e, rheo.Query{Stream: s, From: Epoch.Add(time.Second), To: Epoch.Add(3 * time.Second)}))
			require.Equal(t, pick(evs, 3, 4), q(t, e, rheo.Query{Stream: s, From: Epoch.Add(3 * time.Second)}))
			require.Equal(t, pick(evs, 0, 1), q(t, e, rheo.Query{Stream: s, To: Epoch.Add(time.Second)}))
			require.Equal(t, pick(evs, 2), q(t, e, rheo.Query{Stream: s, Type: "trade", Payload: map[string]any{"currency": "EUR", "curve.name": "ois"},
				From: Epoch.Add(time.Second), To: Epoch.Add(2 * time.Second)}))
		}},
		{"after_and_until_sequence_bound_each_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 5)
			e.appendN(s, 1, 5)
			got, err := e.c.Query(e.ctx, rheo.Query{Stream: s, AfterSequence: 1, UntilSequence: 3})
			require.NoError(t, err)
			require.Equal(t, []pos{{0, 2}, {1, 2}, {0, 3}, {1, 3}}, eventPositions(got))
			got, err = e.c.Query(e.ctx, rheo.Query{Stream: s, AfterSequence: 4, Partitions: []int{1}})
			require.NoError(t, err)
			require.Equal(t, []pos{{1, 5}}, eventPositions(got))
		}},
		{"order_by_each_field_and_direction", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			require.Equal(t, pick(evs, 4, 3, 2, 1, 0), q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Desc(rheo.OrderTimestamp)}}))
			require.Equal(t, pick(evs, 4), q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Desc(rheo.OrderSequence), rheo.Asc(rheo.OrderPartition)}, Limit: 1}))
			require.Equal(t, pick(evs, 1, 3, 0, 2, 4), q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Desc(rheo.OrderPartition), rheo.Asc(rheo.OrderSequence)}}))
			require.Equal(t, pick(evs, 0, 1, 3, 2, 4), q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Asc(rheo.OrderType), rheo.Asc(rheo.OrderTimestamp)}}))
			require.Equal(t, pick(evs, 0, 2, 3, 1, 4), q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Asc(rheo.OrderKey), rheo.Asc(rheo.OrderTimestamp)}}))
			byID := pick(evs, 0, 1, 2, 3, 4)
			slices.Sort(byID)
			require.Equal(t, byID, q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Asc(rheo.OrderID)}}))
			slices.Reverse(byID)
			require.Equal(t, byID[:2], q(t, e, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Desc(rheo.OrderID)}, Limit: 2}))
		}},
		{"limit_caps_the_result", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 150)
			got, err := e.c.Query(e.ctx, rheo.Query{Stream: s})
			require.NoError(t, err)
			require.Len(t, got, 100, "default limit")
			got, err = e.c.Query(e.ctx, rheo.Query{Stream: s, Limit: 7})
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7}, seqs(got))
		}},
		{"pages_never_skip_or_repeat_across_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(4)
			ms := make([]rheo.Message, 40)
			for i := range ms {
				ms[i] = rheo.Message{Key: fmt.Sprintf("k%d", i%9)} // uneven spread over partitions
			}
			written, err := e.c.AppendBatch(e.ctx, s, ms)
			require.NoError(t, err)
			all, err := e.c.Query(e.ctx, rheo.Query{Stream: s, Limit: 1000})
			require.NoError(t, err)
			require.ElementsMatch(t, ids(written), ids(all))
			for _, size := range []int{1, 3, 7, 10, 40, 41} {
				var got []string
				query := rheo.Query{Stream: s, Limit: size}
				pages := 0
				for {
					page, err := e.c.QueryPage(e.ctx, query)
					require.NoError(t, err)
					require.LessOrEqual(t, len(page.Events), size)
					got = append(got, ids(page.Events)...)
					pages++
					require.Less(t, pages, 100, "paging does not terminate")
					if page.NextCursor == "" {
						break
					}
					query.Cursor = page.NextCursor
				}
				require.Equal(t, ids(all), got, "page size %d", size)
			}
		}},
		{"query_all_iterates_every_match", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			require.Empty(t, collect(t, e, rheo.Query{Stream: s, Limit: 2}))
			ms := make([]rheo.Message, 31)
			for i := range ms {
				typ := "even"
				if i%2 == 1 {
					typ = "odd"
				}
				ms[i] = rheo.Message{Type: typ, Partition: ptr(i % 3)}
			}
			_, err := e.c.AppendBatch(e.ctx, s, ms)
			require.NoError(t, err)
			want, err := e.c.Query(e.ctx, rheo.Query{Stream: s, Type: "odd", Limit: 1000})
			require.NoError(t, err)
			require.Len(t, want, 15)
			for page := 1; page <= 5; page++ {
				require.Equal(t, ids(want), collect(t, e, rheo.Query{Stream: s, Type: "odd", Limit: page}), "page size %d", page)
			}
		}},
		{"page_cursor_continues_after_new_appends", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 2)
			e.appendN(s, 1, 2)
			page, err := e.c.QueryPage(e.ctx, rheo.Query{Stream: s, Limit: 2})
			require.NoError(t, err)
			require.Equal(t, []pos{{0, 1}, {1, 1}}, eventPositions(page.Events))
			require.NotEmpty(t, page.NextCursor)
			e.appendN(s, 0, 1)
			rest := collect(t, e, rheo.Query{Stream: s, Limit: 2, Cursor: page.NextCursor})
			require.Len(t, rest, 3, "seq 2 of both partitions and the new seq 3")
		}},
		{"last_page_has_no_cursor", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			page, err := e.c.QueryPage(e.ctx, rheo.Query{Stream: s, Limit: 5})
			require.NoError(t, err)
			require.Len(t, page.Events, 3)
			require.Empty(t, page.NextCursor)
			page, err = e.c.QueryPage(e.ctx, rheo.Query{Stream: s, Limit: 2})
			require.NoError(t, err)
			page, err = e.c.QueryPage(e.ctx, rheo.Query{Stream: s, Limit: 2, Cursor: page.NextCursor})
			require.NoError(t, err)
			require.Equal(t, []int64{3}, seqs(page.Events))
			require.Empty(t, page.NextCursor)
		}},
		{"paging_requires_sequence_order", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			_, err := e.c.QueryPage(e.ctx, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Desc(rheo.OrderTimestamp)}})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
		}},
		{"queries_and_reads_never_change_group_state", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, evs := market(t, e)
			g := e.group(s, rheo.GroupConfig{})
			held := e.fetch(s, g, rheo.FetchOptions{Limit: 2})
			before := e.snapshot()
			for range 3 {
				q(t, e, rheo.Query{Stream: s})
				collect(t, e, rheo.Query{Stream: s, Limit: 1})
				e.readAll(s, 0)
				_, err := e.c.GroupInfo(e.ctx, s, g)
				require.NoError(t, err)
				_, err = e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{})
				require.NoError(t, err)
			}
			require.Equal(t, before, e.snapshot())
			rest := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Len(t, rest, 3)
			e.ack(append(held, rest...)...)
			e.requireLag(s, g, 0, 3, 3)
			e.requireLag(s, g, 1, 2, 2)
			require.Len(t, evs, 5)
		}},
	})
}

// collect runs QueryAll and returns the IDs it yields.
func collect(t *testing.T, e *env, q rheo.Query) []string {
	t.Helper()
	var out []string
	for ev, err := range e.c.QueryAll(e.ctx, q) {
		require.NoError(t, err)
		out = append(out, ev.ID)
		require.Less(t, len(out), 100000, "QueryAll does not terminate")
	}
	return out
}
