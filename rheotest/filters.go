package rheotest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rheo-go/rheo"
)

// FilterStream is the stream FilterAgreement appends to.
const FilterStream = "fuzz-filters"

// FilterInput is one event and one query filter, as they arrive from
// outside (a request body, the command line): a raw payload, one metadata
// pair, and filters on a metadata key and a payload path whose value is
// read the way the rheo command reads --field (JSON when it parses as a
// JSON scalar, else the string itself).
type FilterInput struct {
	Payload          []byte
	MetaKey, MetaVal string
	// FilterMetaVal is the metadata value the query asks for.
	FilterMetaVal string
	// Path and Value form the payload filter; Path "" means none.
	Path, Value string
}

// FilterAgreement appends in.Payload to FilterStream on ref and on got and
// queries each for it with in's filters: both stores must give the same
// error class and return the event in the same cases, with an equal JSON
// payload (PostgreSQL's jsonb returns it normalised, not byte for byte).
// ref is the reference implementation (the memory backend); got the store
// under test. It is the body of backends' filter fuzz targets.
func FilterAgreement(t testing.TB, ref, got *rheo.Client, in FilterInput) {
	t.Helper()
	fv, _ := FieldValue(in.Value).(string)
	if duplicateKeys(in.Payload) || nulChar(in.Payload) || !utf8.Valid(in.Payload) || strings.ContainsRune(in.MetaKey+in.MetaVal+in.FilterMetaVal+fv, 0) ||
		inexactNumber(FieldValue(in.Value)) {
		// Known disagreements, out of this check until the facade refuses
		// such payloads: SQLite's json_extract reads the first of
		// duplicate names where the others read the last, and PostgreSQL's
		// jsonb refuses U+0000 (in payloads, metadata and filters) that
		// the others store and match, and JSON whose strings are not
		// valid UTF-8 (encoding/json's Valid accepts it); a filter number
		// beyond float64's exact integers (|n| >= 2^53) compares as a
		// float in memory and Redis, exactly in PostgreSQL.
		return
	}
	ctx := context.Background()
	msg := rheo.Message{Payload: in.Payload, Metadata: map[string]string{in.MetaKey: in.MetaVal}}
	type outcome struct {
		appendErr, queryErr error
		events              []rheo.Event
	}
	run := func(c *rheo.Client) outcome {
		if err := c.CreateStream(ctx, FilterStream, rheo.StreamConfig{Partitions: 1}); err != nil && !errors.Is(err, rheo.ErrAlreadyExists) {
			t.Fatalf("create %s: %v", FilterStream, err)
		}
		ev, err := c.Append(ctx, FilterStream, msg)
		if err != nil {
			return outcome{appendErr: err}
		}
		q := rheo.Query{Stream: FilterStream, AfterSequence: ev.Sequence - 1, UntilSequence: ev.Sequence,
			Metadata: map[string]string{in.MetaKey: in.FilterMetaVal}}
		if in.Path != "" {
			q.Payload = map[string]any{in.Path: FieldValue(in.Value)}
		}
		evs, err := c.Query(ctx, q)
		return outcome{queryErr: err, events: evs}
	}
	want, have := run(ref), run(got)
	if kind(want.appendErr) != kind(have.appendErr) {
		t.Fatalf("append %q: reference error %v, store error %v", in.Payload, want.appendErr, have.appendErr)
	}
	if kind(want.queryErr) != kind(have.queryErr) {
		t.Fatalf("query %+v: reference error %v, store error %v", in, want.queryErr, have.queryErr)
	}
	if len(want.events) != len(have.events) {
		t.Fatalf("query %+v on payload %q: reference returned %d events, store %d", in, in.Payload, len(want.events), len(have.events))
	}
	for i := range want.events {
		if !jsonEqual(want.events[i].Payload, have.events[i].Payload) {
			t.Fatalf("payload %q stored as %q by the reference, %q by the store", in.Payload, want.events[i].Payload, have.events[i].Payload)
		}
	}
}

// FieldValue reads a payload filter value the way the rheo command reads
// --field: a JSON scalar keeps its JSON type (42, true, null, "42"), and
// anything else is the string itself.
func FieldValue(raw string) any {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return raw
	}
	switch v.(type) {
	case map[string]any, []any:
		return raw
	}
	return v
}

// kind names the sentinel an error wraps ("" for nil).
func kind(err error) string {
	if err == nil {
		return ""
	}
	for _, k := range []error{rheo.ErrInvalidArgument, rheo.ErrInvalidPartition, rheo.ErrStreamNotFound, rheo.ErrUnsupported,
		rheo.ErrBackendUnavailable, rheo.ErrAmbiguous, rheo.ErrAlreadyExists} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return "unclassified: " + err.Error()
}

// duplicateKeys reports whether data is JSON with an object that repeats a
// name (after unescaping).
func duplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj   bool
		seen  map[string]bool
		isKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.isKey {
			if d, ok := tok.(json.Delim); !ok || d != '}' {
				k, _ := tok.(string)
				if top.seen[k] {
					return true
				}
				top.seen[k] = true
				top.isKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if top != nil && top.obj {
				top.isKey = true
			}
			stack = append(stack, &frame{obj: true, seen: map[string]bool{}, isKey: true})
			continue
		case json.Delim('['):
			if top != nil && top.obj {
				top.isKey = true
			}
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.obj {
			top.isKey = true
		}
	}
}

// nulChar reports whether data is JSON with U+0000 in a name or a string.
func nulChar(data []byte) bool {
	if !bytes.Contains(data, []byte(`\u0000`)) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && bytes.IndexByte([]byte(s), 0) >= 0 {
			return true
		}
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

// inexactNumber reports a JSON number filter that float64 cannot hold
// exactly as an integer.
func inexactNumber(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	if i, err := n.Int64(); err == nil {
		return i >= 1<<53 || i <= -(1<<53)
	}
	f, err := n.Float64()
	return err != nil || math.Abs(f) >= 1<<53
}
