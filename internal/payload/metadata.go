package payload

import "encoding/json"

// Metadata decodes stored event metadata (a JSON object of strings) as
// json.Unmarshal into a map[string]string does. Objects of plain ASCII
// strings without escapes, the usual metadata, are read directly; anything
// else goes to json.Unmarshal.
func Metadata(b []byte) (map[string]string, error) {
	if m, ok := plainMetadata(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// plainMetadata reads b when it is an object whose names and values are
// strings of printable ASCII without backslashes, possibly spaced out;
// ok is false for anything else.
func plainMetadata(b []byte) (m map[string]string, ok bool) {
	i := 0
	ws := func() {
		for i < len(b) && isWS(b[i]) {
			i++
		}
	}
	str := func() (string, bool) {
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		start := i + 1
		for j := start; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				i = j + 1
				return string(b[start:j]), true
			case c == '\\' || c < 0x20 || c > 0x7e:
				return "", false
			}
		}
		return "", false
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	m = map[string]string{}
	ws()
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			ws()
			k, ok := str()
			if !ok {
				return nil, false
			}
			ws()
			if i >= len(b) || b[i] != ':' {
				return nil, false
			}
			i++
			ws()
			v, ok := str()
			if !ok {
				return nil, false
			}
			m[k] = v
			ws()
			if i >= len(b) {
				return nil, false
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return nil, false
			}
			i++
		}
	}
	ws()
	return m, i == len(b)
}
