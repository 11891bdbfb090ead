package rheo

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// checkName validates a stream, group, consumer or event name: 1–200 bytes
// of valid UTF-8 without control characters.
func checkName(kind, name string) error {
	if name == "" {
		return Errorf(ErrInvalidArgument, "%s name is empty", kind)
	}
	return checkText(kind, name)
}

// checkText validates an optional short text field (type, key, metadata key).
func checkText(kind, s string) error {
	if len(s) > MaxNameBytes {
		return Errorf(ErrInvalidArgument, "%s %.40q… is %d bytes (max %d)", kind, s, len(s), MaxNameBytes)
	}
	if printableASCII(s) { // most names: one pass, no decoding
		return nil
	}
	if !utf8.ValidString(s) {
		return Errorf(ErrInvalidArgument, "%s %q is not valid UTF-8", kind, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return Errorf(ErrInvalidArgument, "%s %q contains a control character", kind, s)
		}
	}
	return nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

func checkLimit(kind string, limit, def int) (int, error) {
	switch {
	case limit < 0:
		return 0, Errorf(ErrInvalidArgument, "%s limit %d is negative", kind, limit)
	case limit == 0:
		return def, nil
	case limit > MaxLimit:
		return 0, Errorf(ErrInvalidArgument, "%s limit %d exceeds %d", kind, limit, MaxLimit)
	}
	return limit, nil
}

// scope validates partitions against a stream's count and returns them
// distinct and ascending; empty means all.
func scope(stream string, parts []int, n int) ([]int, error) {
	if len(parts) == 0 {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		if p < 0 || p >= n {
			return nil, Errorf(ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, stream, n)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
