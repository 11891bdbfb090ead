package rheo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"iter"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Query searches a stream's log. It never changes any group's state.
// Zero-valued fields do not filter.
type Query struct {
	Stream string
	// Type and Key match the event's fields exactly.
	Type, Key string
	// Partitions restricts the search; empty means all.
	Partitions []int
	// Metadata matches each key's value exactly.
	Metadata map[string]string
	// Payload matches payload fields by JSON equality; a dotted path
	// ("customer.country") reaches into nested objects. Values are strings,
	// numbers, booleans or nil (JSON null). Numbers compare as decimals: a
	// filter's number stands for the decimal it prints as (an integer's
	// digits, a float64's shortest form), and equals a stored number of the
	// same value however it is spelt (2, 2.0, 20e-1), but not one that
	// differs beyond a float64's precision (1.0000000000000001 is not 1).
	//
	// Metadata and Payload filters read the events that the other
	// conditions leave (no store indexes payloads by default); on
	// PostgreSQL an optional index serves them (postgres.Backend's
	// CreatePayloadIndex).
	Payload map[string]any
	// From and To bound the timestamp, both inclusive.
	From, To time.Time
	// AfterSequence (exclusive) and UntilSequence (inclusive) bound the
	// sequence within each partition.
	AfterSequence, UntilSequence int64
	// OrderBy defaults to sequence ascending (ties broken by partition).
	OrderBy []Order
	// Limit defaults to 100; at most 10,000. QueryAll uses it as page size.
	Limit int
	// Cursor continues from Page.NextCursor. Paging requires sequence order.
	Cursor string
}

// Order is one sort key of a Query.
type Order struct {
	// Field is one of sequence, timestamp, partition, id, type, key.
	Field string
	Desc  bool
}

// Order fields.
const (
	OrderSequence  = "sequence"
	OrderTimestamp = "timestamp"
	OrderPartition = "partition"
	OrderID        = "id"
	OrderType      = "type"
	OrderKey       = "key"
)

// Asc orders by field ascending.
func Asc(field string) Order { return Order{Field: field} }

// Desc orders by field descending.
func Desc(field string) Order { return Order{Field: field, Desc: true} }

// Page is one page of a query.
type Page struct {
	Events []Event
	// NextCursor continues the query; "" when there is nothing more.
	NextCursor string
}

// Query returns the events matching q (at most q.Limit).
func (c *Client) Query(ctx context.Context, q Query) ([]Event, error) {
	spec, err := c.querySpec(ctx, q)
	if err != nil {
		return nil, err
	}
	return c.b.Query(ctx, spec)
}

// QueryPage returns one page of q and the cursor of the next. Paging needs
// sequence order (the default).
func (c *Client) QueryPage(ctx context.Context, q Query) (Page, error) {
	spec, err := c.querySpec(ctx, q)
	if err != nil {
		return Page{}, err
	}
	if !sequenceOrder(spec.OrderBy) {
		return Page{}, Errorf(ErrInvalidArgument, "query of stream %q: paging requires sequence order", q.Stream)
	}
	evs, err := c.b.Query(ctx, spec)
	if err != nil {
		return Page{}, err
	}
	page := Page{Events: evs}
	if len(evs) == spec.Limit {
		after := make(map[int]int64, len(spec.After)+1)
		for p, s := range spec.After {
			after[p] = s
		}
		for _, e := range evs {
			after[e.Partition] = max(after[e.Partition], e.Sequence)
		}
		page.NextCursor = encodeCursor(after)
	}
	return page, nil
}

// QueryAll iterates over every event matching q, fetching pages of q.Limit.
// It stops at the first error, which it yields.
func (c *Client) QueryAll(ctx context.Context, q Query) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			page, err := c.QueryPage(ctx, q)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page.Events {
				if !yield(e, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			q.Cursor = page.NextCursor
		}
	}
}

func sequenceOrder(o []Order) bool {
	return len(o) >= 1 && o[0] == Asc(OrderSequence) &&
		(len(o) == 1 || (len(o) == 2 && o[1] == Asc(OrderPartition)))
}

var orderFields = map[string]bool{
	OrderSequence: true, OrderTimestamp: true, OrderPartition: true, OrderID: true, OrderType: true, OrderKey: true,
}

// querySpec validates q and resolves its defaults and cursor.
func (c *Client) querySpec(ctx context.Context, q Query) (QuerySpec, error) {
	if err := c.check(); err != nil {
		return QuerySpec{}, err
	}
	if err := checkName("stream", q.Stream); err != nil {
		return QuerySpec{}, err
	}
	if err := checkText("type", q.Type); err != nil {
		return QuerySpec{}, err
	}
	if err := checkText("key", q.Key); err != nil {
		return QuerySpec{}, err
	}
	limit, err := checkLimit("query", q.Limit, 100)
	if err != nil {
		return QuerySpec{}, err
	}
	q.Limit = limit
	if q.AfterSequence < 0 || q.UntilSequence < 0 {
		return QuerySpec{}, Errorf(ErrInvalidArgument, "query sequence bounds (%d, %d) are negative", q.AfterSequence, q.UntilSequence)
	}
	asked := q.Partitions
	n, err := c.checkPartitions(ctx, q.Stream, func(n int) (err error) {
		if len(asked) > 0 {
			q.Partitions, err = scope(q.Stream, asked, n)
		}
		return err
	})
	if err != nil {
		return QuerySpec{}, err
	}
	for k, v := range q.Metadata {
		if err := checkName("metadata key", k); err != nil {
			return QuerySpec{}, err
		}
		if !utf8.ValidString(v) {
			return QuerySpec{}, Errorf(ErrInvalidArgument, "metadata filter %q: value is not valid UTF-8", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return QuerySpec{}, Errorf(ErrInvalidArgument, "metadata filter %q: value contains a NUL byte (no stored value can)", k)
		}
	}
	if len(q.Payload) > 0 {
		norm := make(map[string]any, len(q.Payload))
		for path, v := range q.Payload {
			if err := checkPayloadPath(path); err != nil {
				return QuerySpec{}, err
			}
			nv, err := normValue(path, v)
			if err != nil {
				return QuerySpec{}, err
			}
			norm[path] = nv
		}
		q.Payload = norm
	}
	if !q.From.IsZero() {
		q.From = normTime(q.From)
	}
	if !q.To.IsZero() {
		q.To = normTime(q.To)
	}
	if len(q.OrderBy) == 0 {
		q.OrderBy = []Order{Asc(OrderSequence)}
	}
	for _, o := range q.OrderBy {
		if !orderFields[o.Field] {
			return QuerySpec{}, Errorf(ErrInvalidArgument, "unknown order field %q (want sequence, timestamp, partition, id, type or key)", o.Field)
		}
	}
	spec := QuerySpec{Query: q}
	if q.Cursor != "" {
		if !sequenceOrder(q.OrderBy) {
			return QuerySpec{}, Errorf(ErrInvalidArgument, "query cursor requires sequence order")
		}
		if spec.After, err = decodeCursor(q.Cursor, n); err != nil {
			return QuerySpec{}, err
		}
	}
	return spec, nil
}

// checkPayloadPath accepts dotted paths of identifier-like segments, which
// every backend can turn into a JSON path without quoting.
func checkPayloadPath(path string) error {
	if path == "" || len(path) > MaxNameBytes {
		return Errorf(ErrInvalidArgument, "payload field %q: empty or longer than %d bytes", path, MaxNameBytes)
	}
	for seg := range strings.SplitSeq(path, ".") {
		if seg == "" {
			return Errorf(ErrInvalidArgument, "payload field %q has an empty segment", path)
		}
		for _, r := range seg {
			if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return Errorf(ErrInvalidArgument, "payload field %q: character %q not allowed (letters, digits, _ and -)", path, r)
			}
		}
	}
	return nil
}

// normValue maps a payload filter value onto string, bool, nil, int64 or
// float64 (integral floats become int64, so 2 and 2.0 compare equal).
func normValue(path string, v any) (any, error) {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return nil, Errorf(ErrInvalidArgument, "payload field %q: value is not valid UTF-8", path)
		}
		if strings.IndexByte(x, 0) >= 0 {
			return nil, Errorf(ErrInvalidArgument, "payload field %q: value contains a NUL character (no stored payload can)", path)
		}
		return x, nil
	case nil, bool:
		return x, nil
	case int:
		return normValue(path, int64(x))
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		if x >= 1<<53 || x <= -(1<<53) {
			return nil, Errorf(ErrInvalidArgument, "payload field %q: %d is beyond ±2^53, where stores disagree on equality", path, x)
		}
		return x, nil
	case uint:
		return normValue(path, float64(x))
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return normValue(path, float64(x))
	case float32:
		return normValue(path, float64(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, Errorf(ErrInvalidArgument, "payload field %q: %v is not a JSON number", path, x)
		}
		if math.Abs(x) >= 1<<53 {
			return nil, Errorf(ErrInvalidArgument, "payload field %q: %v is beyond ±2^53, where stores disagree on equality", path, x)
		}
		if x == math.Trunc(x) {
			return int64(x), nil
		}
		return x, nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return normValue(path, i)
		}
		f, err := x.Float64()
		if err != nil {
			return nil, Errorf(ErrInvalidArgument, "payload field %q: %q is not a number", path, x)
		}
		return normValue(path, f)
	}
	return nil, Errorf(ErrInvalidArgument, "payload field %q: value of type %T is not a string, number, bool or nil", path, v)
}

const cursorPrefix = "c1."

func encodeCursor(after map[int]int64) string {
	m := make(map[string]int64, len(after))
	for p, s := range after {
		m[strconv.Itoa(p)] = s
	}
	b, _ := json.Marshal(m)
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, partitions int) (map[int]int64, error) {
	bad := func(why string) error {
		return Errorf(ErrInvalidArgument, "query cursor %.40q does not decode: %s", s, why)
	}
	raw, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return nil, bad("unknown format")
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return nil, bad("not base64")
	}
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, bad("not a cursor")
	}
	after := make(map[int]int64, len(m))
	for k, v := range m {
		p, err := strconv.Atoi(k)
		if err != nil || p < 0 || p >= partitions || v < 0 {
			return nil, bad("partition or sequence out of range")
		}
		after[p] = v
	}
	return after, nil
}
