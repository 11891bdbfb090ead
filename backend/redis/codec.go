package redis

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/payload"
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
// script converts fewer arguments, and the entry is smaller. Another
// packing would take another field name.
const entryField = "e"

// appendEntry appends the packed form of e to buf: the event ID, type and
// key, each as a uvarint length and the bytes; the timestamp (µs) as a
// varint; the metadata as a uvarint length and the bytes; then the payload
// up to the end. Lengths make it independent of what the fields contain,
// and the payload stays readable at the end.
func appendEntry(buf []byte, e rheo.Event, meta string) []byte {
	for _, f := range [...]string{e.ID, e.Type, e.Key} {
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	buf = binary.AppendVarint(buf, e.Timestamp.UnixMicro())
	buf = binary.AppendUvarint(buf, uint64(len(meta)))
	buf = append(buf, meta...)
	return append(buf, e.Payload...)
}

// cutField reads one length-prefixed field off the front of s.
func cutField(s string) (field, rest string, ok bool) {
	n, w := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
	if w <= 0 || uint64(len(s)-w) < n {
		return "", "", false
	}
	return s[w : w+int(n)], s[w+int(n):], true
}

// decodePacked fills e from an entry value written by appendEntry and
// returns its metadata.
func decodePacked(e *rheo.Event, v string) (meta string, err error) {
	var ok bool
	if e.ID, v, ok = cutField(v); !ok {
		return "", malformedEntry(e)
	}
	if e.Type, v, ok = cutField(v); !ok {
		return "", malformedEntry(e)
	}
	if e.Key, v, ok = cutField(v); !ok {
		return "", malformedEntry(e)
	}
	ts, w := binary.Varint([]byte(v[:min(len(v), binary.MaxVarintLen64)]))
	if w <= 0 {
		return "", malformedEntry(e)
	}
	e.Timestamp = fromMicros(ts)
	if meta, v, ok = cutField(v[w:]); !ok {
		return "", malformedEntry(e)
	}
	e.Payload = json.RawMessage(v)
	return meta, nil
}

// malformedEntry is decodePacked's error, built only when it is returned
// (building it for every entry decoded cost three allocations an event).
func malformedEntry(e *rheo.Event) error {
	return fmt.Errorf("entry %d-0 of partition %d is malformed", e.Sequence, e.Partition)
}

// decodeEvent builds an event from a stream entry's flat field list: the
// packed field, or (entries written before the packed form) one field per
// attribute.
func decodeEvent(stream string, partition int, seq int64, fields any) (rheo.Event, error) {
	e := rheo.Event{Stream: stream, Partition: partition, Sequence: seq}
	var meta string
	fs, ok := fields.([]any)
	if p, packed := fields.(string); packed { // a fetch's packed field alone
		m, err := decodePacked(&e, p)
		if err != nil {
			return e, err
		}
		meta = m
	} else if !ok || len(fs)%2 != 0 {
		return e, fmt.Errorf("entry %d-0 of partition %d has malformed fields", seq, partition)
	}
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
		var err error
		if e.Metadata, err = payload.Metadata([]byte(meta)); err != nil {
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
