// Package match applies a rheo.Query to events in process, for backends that
// scan rather than index (memory, Redis).
package match

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"strings"

	"github.com/rheo-go/rheo"
)

// Event reports whether e passes every filter of q except the partition and
// sequence bounds, which a scanning backend applies while it scans.
func Event(e *rheo.Event, q *rheo.Query) bool {
	if q.Type != "" && e.Type != q.Type || q.Key != "" && e.Key != q.Key {
		return false
	}
	if !q.From.IsZero() && e.Timestamp.Before(q.From) || !q.To.IsZero() && e.Timestamp.After(q.To) {
		return false
	}
	for k, v := range q.Metadata {
		if got, ok := e.Metadata[k]; !ok || got != v {
			return false
		}
	}
	if len(q.Payload) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(e.Payload))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil {
		return false
	}
	for path, want := range q.Payload {
		got, ok := lookup(doc, path)
		if !ok || !jsonEqual(got, want) {
			return false
		}
	}
	return true
}

// Compare orders events by the query's fields, then by (sequence, partition).
func Compare(a, b *rheo.Event, order []rheo.Order) int {
	for _, o := range order {
		var c int
		switch o.Field {
		case rheo.OrderSequence:
			c = cmp.Compare(a.Sequence, b.Sequence)
		case rheo.OrderTimestamp:
			c = a.Timestamp.Compare(b.Timestamp)
		case rheo.OrderPartition:
			c = cmp.Compare(a.Partition, b.Partition)
		case rheo.OrderID:
			c = strings.Compare(a.ID, b.ID)
		case rheo.OrderType:
			c = strings.Compare(a.Type, b.Type)
		case rheo.OrderKey:
			c = strings.Compare(a.Key, b.Key)
		}
		if o.Desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.Sequence, b.Sequence); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// lookup follows a dotted path into a decoded JSON object.
func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for seg := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// jsonEqual compares a decoded JSON value with a filter value the facade
// normalised to string, bool, nil, int64 or float64.
func jsonEqual(got, want any) bool {
	n, isNum := got.(json.Number)
	if !isNum {
		return got == want
	}
	if i, err := n.Int64(); err == nil {
		return want == any(i)
	}
	f, err := n.Float64()
	if err != nil {
		return false
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return want == any(int64(f))
	}
	return want == any(f)
}
