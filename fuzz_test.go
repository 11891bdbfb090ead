package rheo

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/rheo-go/rheo/internal/payload"
)

// FuzzQueryCursor feeds arbitrary strings to the cursor decoder (a cursor
// is outside input: it comes back from the user or the command line). A
// cursor that decodes must name only partitions in range and non-negative
// sequences, and must survive an encode/decode round trip unchanged; one
// that does not decode must be an ErrInvalidArgument.
func FuzzQueryCursor(f *testing.F) {
	f.Add(encodeCursor(map[int]int64{0: 5, 3: 9}), 4)
	f.Add(encodeCursor(map[int]int64{}), 1)
	f.Add("c1.", 1)
	f.Add("c1.eyIwIjotMX0", 2) // {"0":-1}
	f.Add("c1.eyIwMSI6MX0", 2) // {"01":1}
	f.Add("c1.eyIwIjoxLCIwIjoyfQ", 2)
	f.Add("c2.e30", 1)
	f.Add("c1.!!", 1)
	f.Fuzz(func(t *testing.T, s string, partitions int) {
		partitions = 1 + abs(partitions)%1024
		after, err := decodeCursor(s, partitions)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("decodeCursor(%q): error %v is not ErrInvalidArgument", s, err)
			}
			return
		}
		for p, seq := range after {
			if p < 0 || p >= partitions || seq < 0 {
				t.Fatalf("decodeCursor(%q) accepted partition %d sequence %d of %d partitions", s, p, seq, partitions)
			}
		}
		again, err := decodeCursor(encodeCursor(after), partitions)
		if err != nil {
			t.Fatalf("re-encoded cursor of %q does not decode: %v", s, err)
		}
		if !maps.Equal(after, again) {
			t.Fatalf("cursor %q: round trip %v != %v", s, after, again)
		}
	})
}

// FuzzQueryCursorRoundTrip builds a cursor from fuzzed positions: what the
// facade encodes must decode to the same positions.
func FuzzQueryCursorRoundTrip(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, int64(7), int64(1<<62))
	f.Fuzz(func(t *testing.T, parts []byte, a, b int64) {
		after := map[int]int64{}
		for i, p := range parts {
			s := a
			if i%2 == 1 {
				s = b
			}
			after[int(p)] = abs64(s)
		}
		got, err := decodeCursor(encodeCursor(after), 256)
		if err != nil {
			t.Fatalf("cursor of %v does not decode: %v", after, err)
		}
		if !maps.Equal(after, got) {
			t.Fatalf("round trip %v != %v", after, got)
		}
	})
}

// FuzzCompactPayload checks payload validation and compaction against the
// standard library: a payload is accepted exactly when it is empty or a
// valid JSON object, the stored form is json.Compact's output, and it is
// written inside the arena's room without growing it.
func FuzzCompactPayload(f *testing.F) {
	for _, s := range []string{``, `{}`, ` { "a" : [1, 2 ,{"b":"c d"}] } `, `{"a":1}`, `[]`, `"x"`, `12`, `{"a":}`,
		"{\"a\":\"\t\"}", "\t{}\n", `{"a":"\u00e9"}`, `{"a":1e400}`, `{`, ` `, "{\"\xff\":1}", `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		in := bytes.Clone(p)
		arena := make([]byte, 0, max(len(p), 2))
		base := &arena[:1][0]
		out, err := compactObject(&arena, p)
		if !bytes.Equal(in, p) {
			t.Fatalf("compactObject modified its input %q to %q", in, p)
		}
		trimmed := bytes.TrimLeft(p, " \t\r\n")
		wantOK := len(p) == 0 || json.Valid(p) && len(trimmed) > 0 && trimmed[0] == '{'
		if err != nil {
			// Valid objects are refused only by the documented payload
			// rules (internal/payload), which its own fuzz target checks.
			var pe *payload.Error
			if wantOK && !errors.As(err, &pe) {
				t.Fatalf("compactObject(%q) rejected a valid object: %v", p, err)
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("compactObject(%q): error %v is not ErrInvalidArgument", p, err)
			}
			return
		}
		if !wantOK {
			t.Fatalf("compactObject(%q) accepted %q, which is not a JSON object", p, out)
		}
		want := []byte("{}")
		if len(p) > 0 {
			var buf bytes.Buffer
			if err := json.Compact(&buf, p); err != nil {
				t.Fatal(err)
			}
			want = buf.Bytes()
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("compactObject(%q) = %q, want %q", p, out, want)
		}
		if &arena[:1][0] != base {
			t.Fatalf("compactObject(%q) grew the arena", p)
		}
		if cap(out) != len(out) {
			t.Fatalf("compactObject(%q) returned a slice with spare capacity %d", p, cap(out)-len(out))
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

func abs64(n int64) int64 {
	if n < 0 {
		return -(n + 1)
	}
	return n
}
