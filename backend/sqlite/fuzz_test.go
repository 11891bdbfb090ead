package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/sqlite"
	"github.com/rheo-go/rheo/rheotest"
)

// FuzzDSN opens fuzzed sqlite: DSNs whose path is a file name in a temp
// directory. A DSN that opens must open exactly the file it names (not a
// file whose name SQLite's URI syntax cut or decoded) and apply its
// parameters; one that does not must fail with ErrInvalidArgument or, for
// a name the file system refuses, ErrBackendUnavailable.
func FuzzDSN(f *testing.F) {
	for _, s := range [][2]string{{"rheo.db", ""}, {"a.db", "synchronous=full"}, {"b.db", "busy_timeout=2s&synchronous=NORMAL"},
		{"c#d.db", ""}, {"e%41.db", ""}, {"f.db", "mode=ro"}, {"g.db", "busy_timeout=x"}, {"h&i=j.db", ""}, {":memory:", ""}} {
		f.Add(s[0], s[1])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, name, query string) {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/?\x00") || len(name) > 200 {
			return // not one file name in dir; '?' starts the DSN's parameters
		}
		dsn := "sqlite:" + filepath.Join(dir, name)
		if query != "" {
			dsn += "?" + query
		}
		stuck := time.AfterFunc(20*time.Second, func() { panic(fmt.Sprintf("OpenDSN(%q) hangs", dsn)) })
		defer stuck.Stop()
		b, err := sqlite.OpenDSN(context.Background(), dsn)
		if err != nil {
			if !errors.Is(err, rheo.ErrInvalidArgument) && !errors.Is(err, rheo.ErrBackendUnavailable) {
				t.Fatalf("OpenDSN(%q): error %v is neither ErrInvalidArgument nor ErrBackendUnavailable", dsn, err)
			}
			return
		}
		b.Close()
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("OpenDSN(%q) opened something, but not %q: %v (dir holds %q)", dsn, path, err, names)
		}
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(path + suffix)
		}
	})
}

// FuzzFilters checks SQLite's metadata and payload filters (json_extract)
// agree with the in-process matcher of the memory backend on fuzzed
// payloads, paths and values.
func FuzzFilters(f *testing.F) {
	filterSeeds(f)
	ref := rheo.New(memory.New())
	c := rheo.New(open(f))
	f.Fuzz(func(t *testing.T, payload []byte, mk, mv, fmv, path, value string) {
		rheotest.FilterAgreement(t, ref, c, rheotest.FilterInput{Payload: payload, MetaKey: mk, MetaVal: mv, FilterMetaVal: fmv, Path: path, Value: value})
	})
}

func filterSeeds(f *testing.F) {
	for _, s := range [][6]string{
		{`{"a":1}`, "k", "v", "v", "a", "1"},
		{`{"a":1.0}`, "k", "v", "v", "a", "1"},
		{`{"a":{"b":"x"}}`, "k", "v", "v", "a.b", `"x"`},
		{`{"a":{"b":"x"}}`, "k", "v", "v", "a.b", `x`},
		{`{"a":null}`, "k", "v", "v", "a", "null"},
		{`{"a":true}`, "k", "v", "w", "a", "true"},
		{`{"a":1,"a":2}`, "k", "v", "v", "a", "2"},
		{`{"\u0061":"é"}`, "k", "v", "v", "a", `"\u00e9"`},
		{`{"a":12345678901234567890}`, "k", "v", "v", "a", "12345678901234567890"},
		{`{"a":1e2}`, "k", "v", "v", "a", "100"},
		{`{"a":[1]}`, "k", "v", "v", "a", "[1]"},
		{`{"a-b":{"0":1}}`, "k", "", "", "a-b.0", "1"},
		{`[1]`, "k", "v", "v", "", ""},
	} {
		f.Add([]byte(s[0]), s[1], s[2], s[3], s[4], s[5])
	}
}
