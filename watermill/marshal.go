package rheowatermill

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rheo-go/rheo"
)

// BytesKey is the one member of the JSON object that wraps a payload rheo
// cannot store as it is: {"$bytes":"<standard base64 of the payload>"}.
const BytesKey = "$bytes"

// Marshaler turns Watermill messages into rheo messages and stored rheo
// events back into Watermill messages. Unmarshal(Marshal(m)) must give back
// m's UUID, payload and metadata.
type Marshaler interface {
	// Marshal maps msg, published on topic, to the rheo message to append.
	// The Publisher sets Key from its PartitionKey function afterwards.
	Marshal(topic string, msg *message.Message) (rheo.Message, error)
	// Unmarshal maps a stored event back to a Watermill message.
	Unmarshal(e rheo.Event) (*message.Message, error)
}

// DefaultMarshaler is the Marshaler used when none is configured.
//
// The message UUID becomes the event ID (so a retried Publish is idempotent)
// and the metadata becomes the event's metadata, unchanged. The payload:
//
//   - a compact JSON object (valid UTF-8, no insignificant whitespace, no
//     \u0000 escape, and not itself of the wrapper's shape) is stored as it
//     is, so rheo's payload queries reach its fields;
//   - any other payload (empty, not JSON, JSON that is not an object, or an
//     object with whitespace) is stored as {"$bytes":"<base64>"} (standard
//     encoding, with padding), which gives the bytes back exactly.
//
// Stored objects come back byte for byte on memory, SQLite and Redis; on
// PostgreSQL, which keeps payloads as jsonb, they come back compact and
// JSON-equal (jsonb orders keys by length, then bytes, and keeps the last of
// duplicate keys). Set WrapAll for byte-exact payloads on every store.
type DefaultMarshaler struct {
	// WrapAll stores every payload as {"$bytes":…}, JSON objects too.
	WrapAll bool
}

// Marshal implements Marshaler.
func (m DefaultMarshaler) Marshal(_ string, msg *message.Message) (rheo.Message, error) {
	out := rheo.Message{ID: msg.UUID}
	if len(msg.Metadata) > 0 {
		out.Metadata = maps.Clone(map[string]string(msg.Metadata))
	}
	if !m.WrapAll && storableAsIs(msg.Payload) {
		out.Payload = json.RawMessage(msg.Payload)
	} else {
		out.Payload = wrapBytes(msg.Payload)
	}
	return out, nil
}

// Unmarshal implements Marshaler.
func (DefaultMarshaler) Unmarshal(e rheo.Event) (*message.Message, error) {
	payload, err := UnwrapPayload(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("event %q of stream %q: %w", e.ID, e.Stream, err)
	}
	msg := message.NewMessage(e.ID, payload)
	if len(e.Metadata) > 0 {
		msg.Metadata = maps.Clone(e.Metadata)
	}
	return msg, nil
}

// storableAsIs reports whether p is a compact JSON object rheo keeps as it
// is and that unwrapping would not mistake for a wrapped payload.
func storableAsIs(p []byte) bool {
	if len(p) < 2 || p[0] != '{' || p[len(p)-1] != '}' {
		return false
	}
	if !utf8.Valid(p) || bytes.Contains(p, []byte(`\u0000`)) || !json.Valid(p) {
		return false
	}
	if hasWhitespaceOutsideStrings(p) {
		return false
	}
	_, wrapped, _ := unwrap(p)
	return !wrapped
}

// hasWhitespaceOutsideStrings reports insignificant whitespace in valid JSON.
func hasWhitespaceOutsideStrings(p []byte) bool {
	in, esc := false, false
	for _, c := range p {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return true
		}
	}
	return false
}

func wrapBytes(p []byte) json.RawMessage {
	n := base64.StdEncoding.EncodedLen(len(p))
	out := make([]byte, 0, len(`{"$bytes":""}`)+n)
	out = append(out, `{"$bytes":"`...)
	out = base64.StdEncoding.AppendEncode(out, p)
	return append(out, `"}`...)
}

// UnwrapPayload returns the Watermill payload of a stored rheo payload: the
// decoded bytes of a {"$bytes":"…"} wrapper, or the payload itself.
func UnwrapPayload(p json.RawMessage) ([]byte, error) {
	b, wrapped, err := unwrap(p)
	if err != nil {
		return nil, err
	}
	if !wrapped {
		// Only compact objects are stored as they are; a store that spaces
		// JSON out (PostgreSQL's jsonb) gets its spacing removed again.
		if hasWhitespaceOutsideStrings(p) {
			var buf bytes.Buffer
			if err := json.Compact(&buf, p); err == nil {
				return buf.Bytes(), nil
			}
		}
		return []byte(p), nil
	}
	return b, nil
}

// unwrap decodes p when it is a JSON object whose only member is "$bytes"
// with a string value. Stores may space the object out (jsonb), so the
// fast path only gates the full decode.
func unwrap(p []byte) ([]byte, bool, error) {
	t := bytes.TrimLeft(p, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return nil, false, nil
	}
	t = bytes.TrimLeft(t[1:], " \t\r\n")
	if !bytes.HasPrefix(t, []byte(`"$bytes"`)) {
		return nil, false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(p, &obj); err != nil || len(obj) != 1 {
		return nil, false, nil
	}
	var s string
	if err := json.Unmarshal(obj[BytesKey], &s); err != nil {
		return nil, false, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, true, fmt.Errorf("payload %s is not valid standard base64: %w", BytesKey, err)
	}
	return b, true, nil
}
