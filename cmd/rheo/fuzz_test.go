package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzReadLines feeds arbitrary stdin to append's line reader: it returns
// one input per non-blank line, each valid JSON and equal to the trimmed
// line, or an error naming the line at fault; it never panics.
func FuzzReadLines(f *testing.F) {
	for _, s := range []string{"{\"a\":1}\n{\"b\":2}\n", "\n\n  \n", "{\"a\":1}\r\n{}", "{\"a\":\n1}", "x\n", "{}\n[1]\n\"s\"\n",
		"\xef\xbb\xbf{}", strings.Repeat("{}", 10) + "\n", "{} {}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := readLines(bytes.NewReader(in))
		var want [][]byte
		for line := range bytes.SplitSeq(in, []byte("\n")) {
			if b := bytes.TrimSpace(line); len(b) > 0 {
				want = append(want, b)
			}
		}
		if err != nil {
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("readLines(%q): error %q does not name a line", in, err)
			}
			for _, w := range want {
				if !json.Valid(w) {
					return
				}
			}
			// Every line is JSON: only an envelope's fields can be at fault.
			if strings.Contains(err.Error(), "not valid JSON") {
				t.Fatalf("readLines(%q) refused input whose every line is valid JSON: %v", in, err)
			}
			return
		}
		if len(out) != len(want) {
			t.Fatalf("readLines(%q) returned %d payloads, want %d", in, len(out), len(want))
		}
		for i := range out {
			if !bytes.Equal(out[i].raw, want[i]) || !json.Valid(out[i].raw) {
				t.Fatalf("readLines(%q) payload %d = %q, want %q", in, i, out[i].raw, want[i])
			}
		}
	})
}
