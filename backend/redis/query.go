package redis

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

// scanChunk is how many entries one round trip of a query scan reads.
const scanChunk = 1000

// Query implements rheo.Backend. Redis keeps no secondary index, so a query
// scans the selected partitions by sequence range (XRANGE, or XREVRANGE for
// descending sequence order) in chunks of 1000 entries and filters in the
// client. In sequence order each partition stops after Limit matches; other
// orders read the whole range, keeping at most about 2×Limit candidates in
// memory. A call that would read more than the scan limit fails with
// rheo.ErrUnsupported (see WithQueryScanLimit).
func (b *Backend) Query(ctx context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	st, err := b.Stream(ctx, q.Stream)
	if err != nil {
		return nil, err
	}
	base := b.streamBase(q.Stream)
	parts := q.Partitions
	if len(parts) == 0 {
		parts = make([]int, st.Partitions)
		for p := range parts {
			parts[p] = p
		}
	}
	perPart := math.MaxInt
	desc := false
	if q.OrderBy[0].Field == rheo.OrderSequence {
		perPart, desc = q.Limit, q.OrderBy[0].Desc
	}
	byOrder := func(a, b rheo.Event) int { return compareEvents(a, b, q.OrderBy) }
	var out []rheo.Event
	scanned := 0
	for _, p := range parts {
		lo := max(q.AfterSequence, q.After[p]) // exclusive
		hi := st.HighWatermarks[p]             // inclusive
		if q.UntilSequence > 0 {
			hi = min(hi, q.UntilSequence)
		}
		n := 0
		for lo < hi && n < perPart {
			count := int64(scanChunk)
			if b.scanLimit > 0 {
				if scanned >= b.scanLimit {
					return nil, rheo.Errorf(rheo.ErrUnsupported,
						"query of stream %q would scan more than %d entries (Redis has no secondary indexes); narrow it with Partitions, AfterSequence or UntilSequence",
						q.Stream, b.scanLimit)
				}
				count = min(count, int64(b.scanLimit-scanned))
			}
			dir := ""
			if desc {
				dir = "rev"
			}
			v, err := b.run(ctx, rangeScript, base, p, entryID(lo+1), entryID(hi), count, dir)
			if err != nil {
				return nil, b.readErr(err, "query stream %q partition %d", q.Stream, p)
			}
			evs, err := decodeEntries(q.Stream, p, v)
			if err != nil {
				return nil, rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: query stream %q", q.Stream)
			}
			if len(evs) == 0 {
				break
			}
			scanned += len(evs)
			for _, e := range evs {
				if n < perPart && matches(&e, q.Query) {
					out = append(out, e)
					n++
				}
			}
			if desc {
				hi = evs[len(evs)-1].Sequence - 1
			} else {
				lo = evs[len(evs)-1].Sequence
			}
			if perPart == math.MaxInt && len(out) > 2*q.Limit+scanChunk {
				slices.SortFunc(out, byOrder)
				out = out[:q.Limit]
			}
		}
	}
	slices.SortFunc(out, byOrder)
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []rheo.Event{}
	}
	return out, nil
}

// compareEvents orders by the query's fields, then by (sequence, partition).
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

// matches applies the query's filters to one event.
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
