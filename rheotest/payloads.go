package rheotest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// awkwardPayloads are valid payloads that stores are tempted to rewrite:
// each must come back byte for byte as Append returned it (the input less
// insignificant whitespace), from every read path of every backend.
var awkwardPayloads = []struct{ name, in, stored string }{
	{"key_order", `{"b":1,"a":2,"aa":3,"c":{"z":1,"y":2}}`, `{"b":1,"a":2,"aa":3,"c":{"z":1,"y":2}}`},
	{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\" : { } } ", `{"a":[1,2],"b":{}}`},
	{"exponents", `{"a":1e2,"b":1E+2,"c":2.50,"d":-0,"e":1.0e-400,"f":5e-1}`, `{"a":1e2,"b":1E+2,"c":2.50,"d":-0,"e":1.0e-400,"f":5e-1}`},
	{"big_integers", `{"a":123456789012345678901234567890,"b":-9223372036854775809}`, `{"a":123456789012345678901234567890,"b":-9223372036854775809}`},
	{"escapes", `{"a":"\u00e9\n\t\"\\\/","b":"\ud83d\ude00","c":"é😀"}`, `{"a":"\u00e9\n\t\"\\\/","b":"\ud83d\ude00","c":"é😀"}`},
	{"deep_nesting", `{"a":` + strings.Repeat(`[`, 98) + strings.Repeat(`]`, 98) + `}`, `{"a":` + strings.Repeat(`[`, 98) + strings.Repeat(`]`, 98) + `}`},
	{"literals", `{"t":true,"f":false,"n":null,"e":"","o":{},"l":[]}`, `{"t":true,"f":false,"n":null,"e":"","o":{},"l":[]}`},
	{"names_equal_but_case", `{"a":1,"A":2,"a ":3}`, `{"a":1,"A":2,"a ":3}`},
	{"empty", ``, `{}`},
}

func runPayloads(t *testing.T, f Factory) {
	var cases []testCase
	for _, p := range awkwardPayloads {
		cases = append(cases, testCase{"payload_bytes_" + p.name, func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			ev, err := e.c.Append(e.ctx, s, rheo.Message{Type: "awkward", Payload: json.RawMessage(p.in)})
			require.NoError(t, err)
			require.Equal(t, p.stored, string(ev.Payload), "Append result")
			again, err := e.c.Append(e.ctx, s, rheo.Message{ID: ev.ID, Payload: json.RawMessage(p.in)})
			require.NoError(t, err)
			require.Equal(t, p.stored, string(again.Payload), "idempotent re-append returns the stored event")
			read := e.readAll(s, 0)
			require.Len(t, read, 1)
			require.Equal(t, p.stored, string(read[0].Payload), "Read")
			q, err := e.c.Query(e.ctx, rheo.Query{Stream: s, Type: "awkward"})
			require.NoError(t, err)
			require.Len(t, q, 1)
			require.Equal(t, p.stored, string(q[0].Payload), "Query")
			l := e.fetchN(s, g, 1)[0]
			require.Equal(t, p.stored, string(l.Event.Payload), "Fetch")
			require.NoError(t, e.c.Reject(e.ctx, l, "look"))
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1)
			require.Equal(t, p.stored, string(dls[0].Event.Payload), "DeadLetters")
		}})
	}
	cases = append(cases, testCase{"event_timestamps_round_trip_at_any_time", func(t *testing.T, f Factory) {
		// An event's timestamp comes back as appended, to the microsecond,
		// from year 1 to year 9999, the Unix epoch itself included.
		e := newEnv(t, f)
		s := e.stream(1)
		g := e.group(s, rheo.GroupConfig{})
		ats := []time.Time{
			time.Date(1, time.January, 1, 0, 0, 0, 1000, time.UTC),
			time.Date(1600, time.February, 29, 12, 0, 0, 5000, time.UTC),
			time.Unix(0, 0).UTC(),
			time.Unix(0, -1000).UTC(),
			time.Date(2262, time.April, 12, 0, 0, 0, 0, time.UTC),
			time.Date(9999, time.December, 31, 23, 59, 59, 999999000, time.UTC),
		}
		var want []rheo.Event
		for _, at := range ats {
			ev, err := e.c.Append(e.ctx, s, rheo.Message{Payload: json.RawMessage(`{}`), Timestamp: at})
			require.NoError(t, err)
			require.True(t, ev.Timestamp.Equal(at), "Append: %v", ev.Timestamp)
			want = append(want, ev)
		}
		requireSameEvents(t, want, e.readAll(s, 0))
		q, err := e.c.Query(e.ctx, rheo.Query{Stream: s, OrderBy: []rheo.Order{rheo.Asc(rheo.OrderTimestamp)}})
		require.NoError(t, err)
		require.Equal(t, ids([]rheo.Event{want[0], want[1], want[3], want[2], want[4], want[5]}), ids(q), "ordered by timestamp")
		for i, l := range e.fetch(s, g, rheo.FetchOptions{Limit: 10}) {
			require.True(t, l.Event.Timestamp.Equal(ats[i]), "Fetch: %v, want %v", l.Event.Timestamp, ats[i])
		}
	}})
	runCases(t, f, cases)
}
