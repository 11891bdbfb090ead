package postgres_test

import (
	"testing"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/rheotest"
)

// FuzzFilters checks PostgreSQL's metadata and payload filters (jsonb)
// agree with the in-process matcher of the memory backend on fuzzed
// payloads, paths and values.
func FuzzFilters(f *testing.F) {
	for _, s := range [][6]string{
		{`{"a":1}`, "k", "v", "v", "a", "1"},
		{`{"a":1.0}`, "k", "v", "v", "a", "1"},
		{`{"a":{"b":"x"}}`, "k", "v", "v", "a.b", `"x"`},
		{`{"a":{"b":"x"}}`, "k", "v", "v", "a.b", `x`},
		{`{"a":null}`, "k", "v", "v", "a", "null"},
		{`{"a":true}`, "k", "v", "w", "a", "true"},
		{`{"\u0061":"é"}`, "k", "v", "v", "a", `"\u00e9"`},
		{`{"a":12345678901234567890}`, "k", "v", "v", "a", "12345678901234567890"},
		{`{"a":1e2}`, "k", "v", "v", "a", "100"},
		{`{"a":0.1}`, "k", "v", "v", "a", "0.10"},
		{`{"a":[1]}`, "k", "v", "v", "a", "[1]"},
		{`{"a-b":{"0":1}}`, "k", "", "", "a-b.0", "1"},
		{`{"a":"\u0000"}`, "k", "v", "v", "a", `"\u0000"`},
		{`[1]`, "k", "v", "v", "", ""},
	} {
		f.Add([]byte(s[0]), s[1], s[2], s[3], s[4], s[5])
	}
	ref := rheo.New(memory.New())
	c := rheo.New(newBackend(f))
	f.Fuzz(func(t *testing.T, payload []byte, mk, mv, fmv, path, value string) {
		rheotest.FilterAgreement(t, ref, c, rheotest.FilterInput{Payload: payload, MetaKey: mk, MetaVal: mv, FilterMetaVal: fmv, Path: path, Value: value})
	})
}
