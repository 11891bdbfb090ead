package sqlstore

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rheo-go/rheo"
)

// refSpanLeaseID and refSpanToken are the plain definitions that
// SpanLeaseID, SpanToken and SpanIDs compute without parsing twice.
func refSpanLeaseID(token string, seq int64) string {
	if len(token) != 36 {
		return token
	}
	v, err := strconv.ParseUint(token[24:], 16, 64)
	if err != nil {
		return token
	}
	x := strconv.FormatUint(v^(uint64(seq)&spanMask), 16)
	return token[:24] + "000000000000"[len(x):] + x
}

func refSpanToken(id string, seq int64) string {
	if len(id) != 36 {
		return ""
	}
	if _, err := strconv.ParseUint(id[24:], 16, 64); err != nil {
		return ""
	}
	tok := refSpanLeaseID(id, seq)
	if refSpanLeaseID(tok, seq) != id {
		return ""
	}
	return tok
}

func FuzzSpanIDs(f *testing.F) {
	for _, s := range []string{
		"0190b6f2-6a6c-4c1e-8f3a-1b2c3d4e5f60", "0190B6F2-6A6C-4C1E-8F3A-1B2C3D4E5F60",
		"0190b6f2-6a6c-4c1e-8f3a-1B2c3d4e5f60", "0190b6f2-6a6c-4c1e-8f3a-+b2c3d4e5f60",
		"0190b6f2-6a6c-4c1e-8f3a-1b2c3d4e5f6", "", "x",
	} {
		f.Add(s, int64(7))
		f.Add(s, int64(-1))
	}
	f.Fuzz(func(t *testing.T, s string, seq int64) {
		id, receipt := NewSpanIDs(s).Member(seq)
		if want := refSpanLeaseID(s, seq); id != want || receipt != want+SpanReceipt || SpanLeaseID(s, seq) != want {
			t.Fatalf("Member(%q, %d) = %q, %q; want %q", s, seq, id, receipt, want)
		}
		want := refSpanToken(s, seq)
		if got := SpanToken(s, seq); got != want {
			t.Fatalf("SpanToken(%q, %d) = %q, want %q", s, seq, got, want)
		}
		if spanShaped(s) != (want != "") {
			t.Fatalf("spanShaped(%q) = %v, SpanToken %q", s, spanShaped(s), want)
		}
		l := rheo.Lease{ID: s, Receipt: s + SpanReceipt}
		if !IsSpanReceipt(l) {
			t.Fatalf("IsSpanReceipt(%q)", s)
		}
		l.Receipt = s
		if IsSpanReceipt(l) {
			t.Fatalf("IsSpanReceipt(%q) of a plain receipt", s)
		}
		// spanOf finds the span whose token is SpanToken(ID, seq): the
		// token of a real member's lease, and s itself as a token.
		l.Event.Sequence = seq
		for _, tok := range []string{refSpanToken(s, seq), s, refSpanLeaseID(s, seq)} {
			sps := []span{{lo: seq, hi: seq, token: tok, done: "0"}}
			if _, got := spanOf(sps, l); got != (tok != "" && tok == want) {
				t.Fatalf("spanOf(token %q, ID %q, seq %d) = %v; SpanToken is %q", tok, s, seq, got, want)
			}
		}
	})
}

// Digests are stored: spanDigest must keep computing the value the
// streaming definition gives (SHA-256 over each ID preceded by its
// length, first 8 bytes big-endian), pinned here for fixed IDs too.
func TestSpanDigestIsStable(t *testing.T) {
	ref := func(ids []string) int64 {
		h := sha256.New()
		var n [binary.MaxVarintLen64]byte
		for _, id := range ids {
			h.Write(n[:binary.PutUvarint(n[:], uint64(len(id)))])
			h.Write([]byte(id))
		}
		return int64(binary.BigEndian.Uint64(h.Sum(nil)))
	}
	cases := [][]string{nil, {""}, {"a"}, {"a", "b"}, {"ab"}, {strings.Repeat("é", 100)}}
	var many []string
	for i := range 300 {
		many = append(many, fmt.Sprintf("019aa1c2-3d4e-7f00-8000-%012d", i))
		cases = append(cases, slices.Clone(many))
	}
	for _, ids := range cases {
		if got, want := spanDigest(ids), ref(ids); got != want {
			t.Fatalf("spanDigest(%d IDs) = %d, want %d", len(ids), got, want)
		}
	}
	if got := spanDigest([]string{"e-1", "e-2"}); got != 4368553488471652627 {
		t.Fatalf("spanDigest(e-1, e-2) = %d, want the stored 4368553488471652627", got)
	}
}
