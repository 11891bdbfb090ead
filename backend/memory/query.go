package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/rheo-go/rheo"
)

// Query implements rheo.Backend by scanning the selected partitions within
// their sequence bounds; it has no secondary indexes.
func (b *Backend) Query(_ context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, err := b.stream(q.Stream)
	if err != nil {
		return nil, err
	}
	parts := q.Partitions
	if len(parts) == 0 {
		parts = make([]int, len(s.parts))
		for p := range parts {
			parts[p] = p
		}
	}
	// In sequence order no partition contributes more than Limit events to
	// a page, so each scan can stop there.
	perPart := math.MaxInt
	desc := false
	if q.OrderBy[0].Field == rheo.OrderSequence {
		perPart, desc = q.Limit, q.OrderBy[0].Desc
	}
	var out []rheo.Event
	for _, p := range parts {
		evs := s.parts[p]
		lo := max(q.AfterSequence, q.After[p]) // exclusive
		hi := evs.len()                        // inclusive
		if q.UntilSequence > 0 {
			hi = min(hi, q.UntilSequence)
		}
		n := 0
		for i := lo + 1; i <= hi && n < perPart; i++ {
			seq := i
			if desc {
				seq = hi - (i - lo - 1)
			}
			e := evs.at(seq)
			if matches(e, q.Query) {
				out = append(out, clone(*e))
				n++
			}
		}
	}
	slices.SortFunc(out, func(a, b rheo.Event) int { return compareEvents(a, b, q.OrderBy) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []rheo.Event{}
	}
	return out, nil
}

func compareEvents(a, b rheo.Event, order []rheo.Order) int {
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

func matches(e *rheo.Event, q rheo.Query) bool {
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
