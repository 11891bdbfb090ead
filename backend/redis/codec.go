package redis

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rheo-go/rheo"
)

// micros is the stored form of a time: microseconds since the Unix epoch.
func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func fromMicros(n int64) time.Time { return time.UnixMicro(n).UTC() }

// encodeMeta stores metadata as a JSON object; a nil map is stored as ""
// so that it reads back nil.
func encodeMeta(m map[string]string) (string, error) {
	if m == nil {
		return "", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// toInt reads an integer out of a script reply element (an integer reply,
// or a bulk string holding digits).
func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected reply element %T", v)
}

func toStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// entryField is the one field of a stream entry; its value packs the event
// (see appendEntry). One field instead of one per attribute makes the
// append cheaper for Redis: XADD gets 4 arguments instead of 14, the
// script converts fewer arguments, and the entry is smaller.
const entryField = "e"

// appendEntry appends the packed form of e to buf: the event ID, type, key,
// timestamp (µs) and metadata each as <decimal length>:<bytes>, then the
// payload up to the end. Lengths make it independent of what the fields
// contain.
func appendEntry(buf []byte, e rheo.Event, meta string) []byte {
	for _, f := range [...]string{e.ID, e.Type, e.Key} {
		buf = strconv.AppendInt(buf, int64(len(f)), 10)
		buf = append(buf, ':')
		buf = append(buf, f...)
	}
	var ts [20]byte
	t := strconv.AppendInt(ts[:0], e.Timestamp.UnixMicro(), 10)
	buf = strconv.AppendInt(buf, int64(len(t)), 10)
	buf = append(buf, ':')
	buf = append(buf, t...)
	buf = strconv.AppendInt(buf, int64(len(meta)), 10)
	buf = append(buf, ':')
	buf = append(buf, meta...)
	return append(buf, e.Payload...)
}

// cutField reads one <decimal length>:<bytes> field off the front of s.
func cutField(s string) (field, rest string, ok bool) {
	n := 0
	i := 0
	for ; i < len(s) && i < 10 && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int(s[i]-'0')
	}
	if i == 0 || i >= len(s) || s[i] != ':' || len(s)-i-1 < n {
		return "", "", false
	}
	return s[i+1 : i+1+n], s[i+1+n:], true
}

// decodePacked fills e from an entry value written by appendEntry.
func decodePacked(e *rheo.Event, v string) (meta string, err error) {
	var f [5]string
	ok := true
	for i := range f {
		if f[i], v, ok = cutField(v); !ok {
			return "", fmt.Errorf("entry %d-0 of partition %d is malformed", e.Sequence, e.Partition)
		}
	}
	n, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		return "", fmt.Errorf("entry %d-0: timestamp %q", e.Sequence, f[3])
	}
	e.ID, e.Type, e.Key, e.Timestamp = f[0], f[1], f[2], fromMicros(n)
	e.Payload = json.RawMessage(v)
	return f[4], nil
}

// decodeEvent builds an event from a stream entry's flat field list: the
// packed field, or (entries written before the packed form) one field per
// attribute.
func decodeEvent(stream string, partition int, seq int64, fields any) (rheo.Event, error) {
	e := rheo.Event{Stream: stream, Partition: partition, Sequence: seq}
	fs, ok := fields.([]any)
	if !ok || len(fs)%2 != 0 {
		return e, fmt.Errorf("entry %d-0 of partition %d has malformed fields", seq, partition)
	}
	var meta string
	for i := 0; i+1 < len(fs); i += 2 {
		v := toStr(fs[i+1])
		switch toStr(fs[i]) {
		case entryField:
			m, err := decodePacked(&e, v)
			if err != nil {
				return e, err
			}
			meta = m
		case "id":
			e.ID = v
		case "type":
			e.Type = v
		case "key":
			e.Key = v
		case "ts":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return e, fmt.Errorf("entry %d-0: timestamp %q", seq, v)
			}
			e.Timestamp = fromMicros(n)
		case "data":
			e.Payload = json.RawMessage(v)
		case "meta":
			meta = v
		}
	}
	if meta != "" {
		if err := json.Unmarshal([]byte(meta), &e.Metadata); err != nil {
			return e, fmt.Errorf("entry %d-0: metadata: %w", seq, err)
		}
	}
	if e.ID == "" {
		return e, fmt.Errorf("entry %d-0 of partition %d has no event ID", seq, partition)
	}
	return e, nil
}

// decodeRow decodes a {partition, seq, fields} reply row.
func decodeRow(stream string, row any) (rheo.Event, error) {
	r, ok := row.([]any)
	if !ok || len(r) < 3 {
		return rheo.Event{}, fmt.Errorf("malformed event row %T", row)
	}
	p, err := toInt(r[0])
	if err != nil {
		return rheo.Event{}, err
	}
	s, err := toInt(r[1])
	if err != nil {
		return rheo.Event{}, err
	}
	return decodeEvent(stream, int(p), s, r[2])
}

// decodeEntries decodes an XRANGE reply of one partition.
func decodeEntries(stream string, partition int, reply any) ([]rheo.Event, error) {
	ents, ok := reply.([]any)
	if !ok {
		if reply == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("malformed range reply %T", reply)
	}
	out := make([]rheo.Event, 0, len(ents))
	for _, ent := range ents {
		pair, ok := ent.([]any)
		if !ok || len(pair) != 2 {
			return nil, fmt.Errorf("malformed stream entry %T", ent)
		}
		seq, err := entrySeq(toStr(pair[0]))
		if err != nil {
			return nil, err
		}
		e, err := decodeEvent(stream, partition, seq, pair[1])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// entryID is the Redis entry ID of a sequence: the receipt of its leases.
func entryID(seq int64) string { return strconv.FormatInt(seq, 10) + "-0" }

func entrySeq(id string) (int64, error) {
	ms, _, _ := strings.Cut(id, "-")
	return strconv.ParseInt(ms, 10, 64)
}

// flatMap reads a flat HGETALL reply.
func flatMap(v any) map[string]string {
	a, _ := v.([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		m[toStr(a[i])] = toStr(a[i+1])
	}
	return m
}
