package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/rheo-go/rheo"
)

// parseKV turns repeated k=v flags into a map.
func parseKV(flag string, kvs []string) (map[string]string, error) {
	return parsePairs(flag, "key", kvs, func(v string) string { return v })
}

// parseFields turns repeated path=value flags into payload filters. A value
// that parses as JSON keeps its JSON type (42, true, null, "42"); anything
// else is a string.
func parseFields(kvs []string) (map[string]any, error) {
	return parsePairs("field", "path", kvs, jsonValue)
}

// parsePairs turns repeated name=value flags into a map of converted values
// (nil when none); what names the left side in the usage error.
func parsePairs[V any](flag, what string, kvs []string, value func(string) V) (map[string]V, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]V, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--%s %q: want %s=value", flag, kv, what)
		}
		m[k] = value(v)
	}
	return m, nil
}

func jsonValue(raw string) any {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return raw
	}
	switch v.(type) {
	case map[string]any, []any:
		// Filters compare scalars; an object or array is taken literally.
		return raw
	}
	return v
}

// parseTime reads an RFC 3339 instant ("" is the zero time).
func parseTime(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", flag, s)
	}
	return t, nil
}

// parseOrder reads field[:desc] (or field:asc).
func parseOrder(specs []string) ([]rheo.Order, error) {
	var out []rheo.Order
	seen := map[string]bool{}
	for _, s := range specs {
		field, dir, _ := strings.Cut(s, ":")
		if seen[field] {
			return nil, usagef("--order %q: %s is already ordered by (name each field once)", s, field)
		}
		seen[field] = true
		switch strings.ToLower(dir) {
		case "", "asc":
			out = append(out, rheo.Asc(field))
		case "desc":
			out = append(out, rheo.Desc(field))
		default:
			return nil, usagef("--order %q: want field, field:asc or field:desc", s)
		}
	}
	return out, nil
}

// parsePosition reads a start position: beginning, latest, a sequence
// number, or an RFC 3339 time.
func parsePosition(s string) (rheo.Position, error) {
	switch s {
	case "", "beginning":
		return rheo.Beginning(), nil
	case "latest":
		return rheo.Latest(), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return rheo.Position{}, usagef("--start %d: a sequence number is 0 or more (0 is the same as beginning)", n)
		}
		return rheo.AfterSequence(n), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return rheo.AtTime(t), nil
	}
	return rheo.Position{}, usagef("--start %q: want beginning, latest, a sequence number or an RFC 3339 time", s)
}

// queryFlags are the filters of rheo.Query, shared by query and replay.
type queryFlags struct {
	typ, key              string
	partitions            []int
	meta, fields          []string
	from, to              string
	afterSeq, untilSeq    int64
	order                 []string
	limit                 int
	cursor                string
	withPartitions, paged bool
}

// register adds the filter flags; partitions and paging only where the
// command means them.
func (q *queryFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&q.typ, "type", "", "match events of this type")
	fs.StringVar(&q.key, "key", "", "match events with this key")
	if q.withPartitions {
		fs.IntSliceVar(&q.partitions, "partition", nil, "only these partitions (repeatable)")
	}
	fs.StringArrayVar(&q.meta, "meta", nil, "match metadata key=value (repeatable)")
	fs.StringArrayVar(&q.fields, "field", nil, "match payload path=value; dotted paths reach nested fields; the value is JSON when it parses as JSON, else a string (repeatable)")
	fs.StringVar(&q.from, "from", "", "only events at or after this RFC 3339 time")
	fs.StringVar(&q.to, "to", "", "only events at or before this RFC 3339 time")
	fs.Int64Var(&q.afterSeq, "after-seq", 0, "only sequences above this (per partition)")
	fs.Int64Var(&q.untilSeq, "until-seq", 0, "only sequences up to this (per partition)")
	if q.paged {
		fs.StringArrayVar(&q.order, "order", nil, "sort by field[:desc]: sequence, timestamp, partition, id, type, key (repeatable)")
		fs.IntVar(&q.limit, "limit", 100, "most events to return (max 10000)")
		fs.StringVar(&q.cursor, "cursor", "", "continue from a previous page's next cursor")
	}
}

// set reports whether any filter was given.
func (q *queryFlags) set() bool {
	return q.typ != "" || q.key != "" || len(q.meta) > 0 || len(q.fields) > 0 ||
		q.from != "" || q.to != "" || q.afterSeq != 0 || q.untilSeq != 0
}

func (q *queryFlags) build(stream string) (rheo.Query, error) {
	out := rheo.Query{Stream: stream, Type: q.typ, Key: q.key, Partitions: q.partitions,
		AfterSequence: q.afterSeq, UntilSequence: q.untilSeq, Limit: q.limit, Cursor: q.cursor}
	if q.paged {
		if err := checkLimit(q.limit); err != nil {
			return out, err
		}
	}
	var err error
	if out.Metadata, err = parseKV("meta", q.meta); err != nil {
		return out, err
	}
	if out.Payload, err = parseFields(q.fields); err != nil {
		return out, err
	}
	if out.From, err = parseTime("from", q.from); err != nil {
		return out, err
	}
	if out.To, err = parseTime("to", q.to); err != nil {
		return out, err
	}
	if out.OrderBy, err = parseOrder(q.order); err != nil {
		return out, err
	}
	return out, nil
}

// checkLimit refuses a --limit out of 1…rheo.MaxLimit (the default, 100,
// is what leaving the flag out means).
func checkLimit(n int) error {
	if n < 1 || n > rheo.MaxLimit {
		return usagef("--limit %d: want 1 to %d (leave it out for 100)", n, rheo.MaxLimit)
	}
	return nil
}
