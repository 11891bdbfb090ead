// Package payload checks and compacts event payloads in one pass.
//
// A payload is stored byte-identical on every backend, so the facade only
// accepts JSON that every store can keep and index exactly as given:
//
//   - a JSON object (RFC 8259), at most MaxDepth levels deep;
//   - valid UTF-8, no \u0000 escape and no unpaired surrogate escape
//     (PostgreSQL's json and jsonb refuse both);
//   - no object with two equal keys (stores disagree on which one wins);
//   - numbers of at most MaxDigits digits with an exponent within
//     ±MaxExponent (every store can index their value).
//
// Compaction removes insignificant whitespace and nothing else: strings,
// escapes, numbers and key order stay as the producer wrote them.
package payload

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Limits of an accepted payload.
const (
	MaxDepth    = 100
	MaxDigits   = 1000
	MaxExponent = 1000
)

// Error says what is wrong with a payload and where.
type Error struct {
	Offset int // byte offset in the input
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("%s at byte %d", e.Msg, e.Offset) }

// Compact checks that src is an acceptable payload and appends it, without
// insignificant whitespace, to dst. On error dst is returned unchanged in
// length (its spare capacity may have been written). dst's spare capacity
// must not overlap src: member names are compared where they stand in src.
func Compact(dst, src []byte) ([]byte, error) {
	s := scanner{src: src, dst: dst}
	s.ws()
	if s.i >= len(src) || src[s.i] != '{' {
		if s.i >= len(src) {
			return dst, &Error{s.i, "payload is empty: it must be a JSON object"}
		}
		return dst, &Error{s.i, fmt.Sprintf("payload must be a JSON object, not %s", kind(src[s.i]))}
	}
	if err := s.object(); err != nil {
		return dst, err
	}
	s.ws()
	if s.i < len(src) {
		return dst, &Error{s.i, "unexpected data after the payload object"}
	}
	return append(s.dst, src[s.mark:]...), nil
}

func kind(c byte) string {
	switch {
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	}
	return fmt.Sprintf("%q", c)
}

// scanner copies src to dst lazily: src[mark:i] is checked but not yet
// copied, so a payload without whitespace is copied in one piece.
type scanner struct {
	src   []byte
	i     int
	mark  int
	dst   []byte
	depth int
}

func (s *scanner) fail(msg string) error { return &Error{s.i, msg} }

// ws skips whitespace; it is inlined, and rarely finds any.
func (s *scanner) ws() {
	if s.i < len(s.src) && s.src[s.i] <= ' ' {
		s.skipWS()
	}
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipWS copies what precedes the whitespace at i and skips it.
//
//go:noinline
func (s *scanner) skipWS() {
	if !isWS(s.src[s.i]) {
		return
	}
	s.dst = append(s.dst, s.src[s.mark:s.i]...)
	for s.i < len(s.src) && isWS(s.src[s.i]) {
		s.i++
	}
	s.mark = s.i
}

// key is an object member name: where its quoted form sits in src (which
// compaction copies unchanged), and whether it holds escapes (then equal
// names may differ in bytes).
type key struct {
	start, end int
	escaped    bool
}

func (s *scanner) object() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(fmt.Sprintf("payload is nested deeper than %d levels", MaxDepth))
	}
	s.i++
	s.ws()
	if s.i < len(s.src) && s.src[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	var small [8]key
	keys := small[:0]
	var names map[string]struct{} // for objects with many members
	// A bit per name without escapes, by a hash of its bytes: a name whose
	// bit is clear cannot repeat one, unless some name has escapes.
	var sig uint64
	anyEscaped := false
	for {
		if s.i >= len(s.src) || s.src[s.i] != '"' {
			return s.fail("expected a string member name")
		}
		at := s.i
		escaped, err := s.str()
		if err != nil {
			return err
		}
		k := key{at, s.i, escaped}
		raw := s.src[at:s.i]
		bit := uint64(1) << ((uint(len(raw))*7 + uint(raw[1]) + uint(raw[len(raw)-2])*3) & 63)
		if names != nil || escaped || anyEscaped || sig&bit != 0 {
			if err := s.unique(keys, &names, k); err != nil {
				return err
			}
		}
		sig |= bit
		anyEscaped = anyEscaped || escaped
		if names == nil {
			keys = append(keys, k)
			if len(keys) > 32 {
				names = make(map[string]struct{}, 2*len(keys))
				for _, o := range keys {
					names[s.name(o)] = struct{}{}
				}
			}
		}
		s.ws()
		if s.i >= len(s.src) || s.src[s.i] != ':' {
			return s.fail("expected ':' after a member name")
		}
		s.i++
		s.ws()
		if err := s.value(); err != nil {
			return err
		}
		if done, err := s.after('}', "object"); done || err != nil {
			return err
		}
	}
}

// unique refuses a member name that the object already has (in keys, or
// in names once it has many).
func (s *scanner) unique(keys []key, names *map[string]struct{}, k key) error {
	if *names != nil {
		n := s.name(k)
		if _, dup := (*names)[n]; dup {
			return &Error{k.start, fmt.Sprintf("duplicate member name %q", n)}
		}
		(*names)[n] = struct{}{}
		return nil
	}
	raw := s.src[k.start:k.end]
	for _, o := range keys {
		if !k.escaped && !o.escaped {
			if o.end-o.start == len(raw) && s.src[o.start+1] == raw[1] && bytes.Equal(raw, s.src[o.start:o.end]) {
				return &Error{k.start, fmt.Sprintf("duplicate member name %s", raw)}
			}
		} else if s.name(k) == s.name(o) {
			return &Error{k.start, fmt.Sprintf("duplicate member name %q", s.name(k))}
		}
	}
	return nil
}

// name decodes a member name already checked by str.
func (s *scanner) name(k key) string {
	raw := s.src[k.start:k.end]
	if !k.escaped {
		return string(raw[1 : len(raw)-1])
	}
	var n string
	if err := json.Unmarshal(raw, &n); err != nil {
		return string(raw) // unreachable: str validated it
	}
	return n
}

func (s *scanner) value() error {
	if s.i >= len(s.src) {
		return s.fail("expected a value")
	}
	switch c := s.src[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		_, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	default:
		return s.fail(fmt.Sprintf("unexpected %q where a value belongs", c))
	}
}

func (s *scanner) array() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(fmt.Sprintf("payload is nested deeper than %d levels", MaxDepth))
	}
	s.i++
	s.ws()
	if s.i < len(s.src) && s.src[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := s.value(); err != nil {
			return err
		}
		if done, err := s.after(']', "array"); done || err != nil {
			return err
		}
	}
}

// after reads what follows a member or element of an object or array
// (what) closed by end: a ',' (another one follows) or end (done).
func (s *scanner) after(end byte, what string) (done bool, err error) {
	s.ws()
	if s.i >= len(s.src) {
		return false, s.fail("unterminated " + what)
	}
	switch s.src[s.i] {
	case ',':
		s.i++
		s.ws()
		return false, nil
	case end:
		s.i++
		s.depth--
		return true, nil
	}
	return false, s.fail("expected ',' or '" + string(end) + "' in an " + what)
}

func (s *scanner) literal(word string) error {
	if len(s.src)-s.i < len(word) || string(s.src[s.i:s.i+len(word)]) != word {
		return s.fail("invalid literal (expected " + word + ")")
	}
	s.i += len(word)
	return nil
}

func (s *scanner) number() error {
	start := s.i
	digits := 0
	if s.src[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.src) && s.src[s.i] == '0':
		s.i++
		digits++
	case s.i < len(s.src) && s.src[s.i] >= '1' && s.src[s.i] <= '9':
		for s.i < len(s.src) && s.src[s.i] >= '0' && s.src[s.i] <= '9' {
			s.i++
			digits++
		}
	default:
		return s.fail("invalid number")
	}
	if s.i < len(s.src) && s.src[s.i] == '.' {
		s.i++
		n := 0
		for s.i < len(s.src) && s.src[s.i] >= '0' && s.src[s.i] <= '9' {
			s.i++
			n++
		}
		if n == 0 {
			return s.fail("invalid number: no digit after the decimal point")
		}
		digits += n
	}
	if s.i < len(s.src) && (s.src[s.i] == 'e' || s.src[s.i] == 'E') {
		s.i++
		if s.i < len(s.src) && (s.src[s.i] == '+' || s.src[s.i] == '-') {
			s.i++
		}
		exp, n := 0, 0
		for s.i < len(s.src) && s.src[s.i] >= '0' && s.src[s.i] <= '9' {
			if exp <= MaxExponent {
				exp = exp*10 + int(s.src[s.i]-'0')
			}
			s.i++
			n++
		}
		if n == 0 {
			return s.fail("invalid number: no digit in the exponent")
		}
		if exp > MaxExponent {
			return &Error{start, fmt.Sprintf("number exponent beyond ±%d", MaxExponent)}
		}
	}
	if digits > MaxDigits {
		return &Error{start, fmt.Sprintf("number of %d digits (max %d)", digits, MaxDigits)}
	}
	return nil
}

// str copies a string, checking its escapes and UTF-8; it reports whether
// the string holds escapes.
func (s *scanner) str() (bool, error) {
	start := s.i
	s.i++
	escaped := false
	for {
		// Plain ASCII runs are most of a payload.
		src, i := s.src, s.i
		for ; i+8 <= len(src); i += 8 {
			// Eight bytes at a time; any byte that is not plain (and some
			// that are, after one that is not) stops the word loop.
			w := binary.LittleEndian.Uint64(src[i:])
			const ones, highs = 0x0101010101010101, 0x8080808080808080
			quote, backslash := w^(ones*'"'), w^(ones*'\\')
			if (w|(w-ones*0x20)|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0 {
				break
			}
		}
		for i < len(src) && plain[src[i]] {
			i++
		}
		s.i = i
		if s.i >= len(s.src) {
			return escaped, &Error{start, "unterminated string"}
		}
		switch c := s.src[s.i]; {
		case c == '"':
			s.i++
			return escaped, nil
		case c < 0x20:
			return escaped, s.fail("control character in a string (escape it)")
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return escaped, err
			}
		default:
			r, size := utf8.DecodeRune(s.src[s.i:])
			if r == utf8.RuneError && size <= 1 {
				return escaped, s.fail("invalid UTF-8 in a string")
			}
			s.i += size
		}
	}
}

func (s *scanner) escape() error {
	if s.i+1 >= len(s.src) {
		return s.fail("unterminated escape")
	}
	switch s.src[s.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i += 2
		return nil
	case 'u':
	default:
		return s.fail(fmt.Sprintf("invalid escape \\%c", s.src[s.i+1]))
	}
	r, ok := hex4(s.src[s.i+2:])
	if !ok {
		return s.fail("invalid \\u escape")
	}
	switch {
	case r == 0:
		return s.fail(`\u0000 is not allowed in a payload`)
	case r >= 0xDC00 && r < 0xE000:
		return s.fail(fmt.Sprintf(`unpaired surrogate \u%04x`, r))
	case r >= 0xD800 && r < 0xDC00:
		rest := s.src[s.i+6:]
		if len(rest) < 6 || rest[0] != '\\' || rest[1] != 'u' {
			return s.fail(fmt.Sprintf(`unpaired surrogate \u%04x`, r))
		}
		lo, ok := hex4(rest[2:])
		if !ok || lo < 0xDC00 || lo >= 0xE000 {
			return s.fail(fmt.Sprintf(`unpaired surrogate \u%04x`, r))
		}
		s.i += 12
		return nil
	}
	s.i += 6
	return nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// plain are the bytes a string holds as they are: printable ASCII but the
// quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
