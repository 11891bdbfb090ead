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
// and the metadata becomes the event's metadata, unchanged (empty metadata is
// stored as none and comes back empty). The payload:
//
//   - a compact JSON object (valid UTF-8, no insignificant whitespace, no
//     \u0000 escape, and not itself of the wrapper's shape) is stored as it
//     is, so rheo's payload queries reach its fields;
//   - any other payload (empty, not JSON, JSON that is not an object, or an
//     object with whitespace) is stored as {"$bytes":"<base64>"} (standard
//     encoding, with padding), which gives the bytes back exactly.
//
// The Publisher also wraps an object rheo refuses to store exactly as it is
// (rheo is the judge: duplicate member names, say). Stored objects come back
// byte for byte where the store keeps payloads exactly; a store that keeps
// them only as jsonb gives them back compact and JSON-equal, keys in jsonb's
// order. Set WrapAll for byte-exact payloads whatever the store.
type DefaultMarshaler struct {
	// WrapAll stores every payload as {"$bytes":…}, JSON objects too.
	WrapAll bool
}

// Marshal implements Marshaler.
func (m DefaultMarshaler) Marshal(_ string, msg *message.Message) (rheo.Message, error) {
	out, _ := m.marshal(msg, true)
	if len(out.Metadata) > 0 {
		out.Metadata = maps.Clone(out.Metadata)
	}
	return out, nil
}

// marshal is Marshal without copying the metadata (rheo copies what it
// keeps). With verify false it skips the full JSON check of payloads that
// look like compact objects and reports whether it did so (unverified): the
// Publisher then relies on rheo's own check, which refuses invalid JSON, and
// wraps and retries those payloads when rheo refuses the batch.
func (m DefaultMarshaler) marshal(msg *message.Message, verify bool) (out rheo.Message, unverified bool) {
	out = rheo.Message{ID: msg.UUID}
	if len(msg.Metadata) > 0 {
		// Watermill gives every message a metadata map; an empty one is
		// stored as none (nothing to encode, store or decode) and comes
		// back as the empty map of a new message.
		out.Metadata = msg.Metadata
	}
	if !m.WrapAll && storableAsIs(msg.Payload, verify) {
		out.Payload = json.RawMessage(msg.Payload)
		return out, !verify
	}
	out.Payload = wrapBytes(msg.Payload)
	return out, false
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
func storableAsIs(p []byte, verify bool) bool {
	if len(p) < 2 || p[0] != '{' || p[len(p)-1] != '}' {
		return false
	}
	if !compactText(p) || (verify && !json.Valid(p)) {
		return false
	}
	_, wrapped, _ := unwrap(p)
	return !wrapped
}

// compactText is utf8.Valid(p) && !bytes.Contains(p, []byte(`\u0000`)) &&
// !hasWhitespaceOutsideStrings(p), in one pass over ASCII text (the usual
// case): most bytes cost a table lookup.
func compactText(p []byte) bool {
	in, esc := false, false
	for i := 0; i < len(p); i++ {
		k := textClass[p[i]]
		if k == plain && !esc {
			continue
		}
		switch {
		case k == nonASCII:
			return utf8.Valid(p) && !bytes.Contains(p, []byte(`\u0000`)) && !hasWhitespaceOutsideStrings(p)
		case k == backslash && bytes.HasPrefix(p[i+1:], []byte("u0000")):
			return false
		case esc:
			esc = false
		case k == backslash:
			esc = in
		case k == quote:
			in = !in
		case k == space && !in:
			return false
		}
	}
	return true
}

// The classes of bytes compactText tells apart.
const (
	plain = iota
	quote
	backslash
	space
	nonASCII
)

var textClass = func() (t [256]uint8) {
	t['"'], t['\\'] = quote, backslash
	t[' '], t['\t'], t['\n'], t['\r'] = space, space, space, space
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = nonASCII
	}
	return t
}()

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
