// Package match applies a rheo.Query to events in process, for backends that
// scan rather than index (memory, Redis).
package match

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math/big"
	"strconv"
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
	w, ok := NumberText(want)
	return ok && NumberEqual(string(n), w)
}

// NumberText is the decimal a numeric filter value stands for: an int64's
// digits, or a float64's shortest representation (as encoding/json writes
// it); ok is false for a value that is not a number.
func NumberText(v any) (string, bool) {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	}
	return "", false
}

// NumberEqual reports whether two JSON numbers stand for the same decimal
// value: 2, 2.0, 2e0 and 20e-1 are equal, 1.0000000000000001 and 1 are
// not (as PostgreSQL's jsonb compares them). Numbers that differ as
// float64 differ as decimals, so only those that agree as float64 are
// compared exactly.
func NumberEqual(a, b string) bool {
	if a == b {
		return true
	}
	fa, errA := strconv.ParseFloat(a, 64)
	fb, errB := strconv.ParseFloat(b, 64)
	if errA == nil && errB == nil && fa != fb {
		return false
	}
	ra, okA := new(big.Rat).SetString(a)
	rb, okB := new(big.Rat).SetString(b)
	return okA && okB && ra.Cmp(rb) == 0
}
