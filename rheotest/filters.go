package rheotest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

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
// error class and return the event in the same cases, with the same
// payload bytes.
// ref is the reference implementation (the memory backend); got the store
// under test. It is the body of backends' filter fuzz targets.
func FilterAgreement(t testing.TB, ref, got *rheo.Client, in FilterInput) {
	t.Helper()
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
		if string(want.events[i].Payload) != string(have.events[i].Payload) {
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
