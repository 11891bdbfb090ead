package rheowatermill

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// compactText is the three checks it replaces, on any input.
func FuzzCompactText(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"a":1}`, `{ "a": 1 }`, `{"z":"\u0000"}`, `{"z":"\\u0000"}`,
		`\u0000`, `{"q":"\" "}`, `{"q":"\\" }`, "{\"k\":\"\xff\"}", "{\"k\":\"\\\xff \"}", `{"é":" "}`, "\t", `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		want := utf8.Valid(p) && !bytes.Contains(p, []byte(`\u0000`)) && !hasWhitespaceOutsideStrings(p)
		if got := compactText(p); got != want {
			t.Fatalf("compactText(%q) = %v, want %v", p, got, want)
		}
	})
}

func BenchmarkCompactText(b *testing.B) {
	p := []byte(`{"order":"o-123456","amount":4200,"currency":"EUR"}`)
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			compactText(p)
		}
	})
	b.Run("three-pass", func(b *testing.B) {
		for b.Loop() {
			_ = utf8.Valid(p) && !bytes.Contains(p, []byte(`\u0000`)) && !hasWhitespaceOutsideStrings(p)
		}
	})
}
