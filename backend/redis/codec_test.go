package redis

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// The packed entry must round-trip whatever its fields contain: empty
// strings, bytes that look like framing, and timestamps before 1970.
func TestPackedEntryRoundTrip(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	cases := []rheo.Event{
		{ID: "12:34", Type: "3:abc", Key: "", Timestamp: ts, Payload: json.RawMessage(`{"a":"1:2"}`)},
		{ID: "x", Type: "", Key: "k:9", Timestamp: time.UnixMicro(0).UTC(), Payload: json.RawMessage(`{}`),
			Metadata: map[string]string{"trace": "5:ab", "": ""}},
		{ID: "ü-é", Type: "\x05\x80", Key: "0", Timestamp: time.Date(1960, 1, 1, 0, 0, 0, 1000, time.UTC), Payload: json.RawMessage(`{"n":1}`), Metadata: map[string]string{}},
	}
	for _, want := range cases {
		meta, err := encodeMeta(want.Metadata)
		require.NoError(t, err)
		v := string(appendEntry(nil, want, meta))
		got, err := decodeEvent("s", 2, 7, []any{entryField, v})
		require.NoError(t, err, "entry %q", v)
		// A fetch returns the packed field alone.
		alone, err := decodeEvent("s", 2, 7, v)
		require.NoError(t, err, "entry %q alone", v)
		want.Stream, want.Partition, want.Sequence = "s", 2, 7
		if len(want.Metadata) == 0 && want.Metadata != nil {
			want.Metadata = map[string]string{}
		}
		require.Equal(t, want, got)
		require.Equal(t, want, alone)
	}
}

func TestPackedEntryMalformed(t *testing.T) {
	for _, v := range []string{"", "\x03ab", "\x01a\x01b\x01c", "\x01a\x01b\x01c\x80", "\x01a\x01b\x01c\x02\x09{}"} {
		_, err := decodeEvent("s", 0, 1, []any{entryField, v})
		require.Error(t, err, "entry %q", v)
		_, err = decodeEvent("s", 0, 1, v)
		require.Error(t, err, "entry %q alone", v)
	}
}

// Entries with one field per attribute still decode.
func TestUnpackedEntryDecodes(t *testing.T) {
	got, err := decodeEvent("s", 1, 3, []any{"id", "e-1", "type", "t", "key", "k", "ts", "5", "data", `{"a":1}`, "meta", `{"m":"v"}`})
	require.NoError(t, err)
	require.Equal(t, rheo.Event{Stream: "s", Partition: 1, Sequence: 3, ID: "e-1", Type: "t", Key: "k",
		Timestamp: time.UnixMicro(5).UTC(), Payload: json.RawMessage(`{"a":1}`), Metadata: map[string]string{"m": "v"}}, got)
}

// BenchmarkDecodePacked decodes one packed entry of the usual shape, as a
// fetch does for every event it returns; ns/op and allocs/op are per event.
func BenchmarkDecodePacked(b *testing.B) {
	e := rheo.Event{ID: "0190b1c2-7d4e-7f5a-9b6c-1d2e3f405162", Type: "order.created", Key: "customer-42",
		Timestamp: time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC),
		Payload:   json.RawMessage(`{"order_id":42,"customer":"c-42","amount_cents":1250,"currency":"EUR","status":"created","items":3}`)}
	packed := string(appendEntry(nil, e, ""))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeEvent("orders", 1, 42, packed); err != nil {
			b.Fatal(err)
		}
	}
}
