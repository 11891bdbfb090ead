package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompactKeepsBytesButWhitespace(t *testing.T) {
	for in, want := range map[string]string{
		`{}`: `{}`,
		" {\n\t\"b\" : 1 ,\r\n \"a\":[ 1 , 2 ] } ": `{"b":1,"a":[1,2]}`,
		`{"n":1e2,"m":2.50,"x":-0,"y":1E+2}`:       `{"n":1e2,"m":2.50,"x":-0,"y":1E+2}`,
		`{"big":123456789012345678901234567890}`:   `{"big":123456789012345678901234567890}`,
		`{"s":"a b\u00e9\n\"\\\/","t":"é😀"}`:       `{"s":"a b\u00e9\n\"\\\/","t":"é😀"}`,
		`{"pair":"\ud83d\ude00"}`:                  `{"pair":"\ud83d\ude00"}`,
		`{"a":{"b":[true,false,null,{}]}}`:         `{"a":{"b":[true,false,null,{}]}}`,
		`{"a":1,"A":2,"a ":3}`:                     `{"a":1,"A":2,"a ":3}`,
		`{"a":{"k":1},"b":{"k":2}}`:                `{"a":{"k":1},"b":{"k":2}}`,
	} {
		got, err := Compact(nil, []byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, string(got), in)
		var std bytes.Buffer
		require.NoError(t, json.Compact(&std, []byte(in)))
		require.Equal(t, std.String(), string(got), "same as encoding/json's compaction: %s", in)
	}
}

func TestCompactRefuses(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MaxDepth) + `1` + strings.Repeat(`}`, MaxDepth)
	tooDeep := strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth)
	_, err := Compact(nil, []byte(deep))
	require.NoError(t, err, "exactly MaxDepth levels")
	for in, msg := range map[string]string{
		``:                         "empty",
		`   `:                      "empty",
		`[1]`:                      "not an array",
		`"s"`:                      "not a string",
		`1`:                        "not a number",
		`null`:                     "not null",
		`true`:                     "not a boolean",
		`{"a":1}x`:                 "unexpected data",
		`{"a":1}{}`:                "unexpected data",
		`{"a":1,}`:                 "expected a string member name",
		`{"a" 1}`:                  "expected ':'",
		`{"a":1`:                   "unterminated object",
		`{"a":[1,]}`:               "where a value belongs",
		`{"a":01}`:                 "expected ',' or '}'",
		`{"a":1.}`:                 "no digit after the decimal point",
		`{"a":1e}`:                 "no digit in the exponent",
		`{"a":+1}`:                 "where a value belongs",
		`{"a":NaN}`:                "where a value belongs",
		`{"a":tru}`:                "invalid literal",
		`{"a":"x}`:                 "unterminated string",
		"{\"a\":\"x\ty\"}":         "control character",
		`{"a":"\x"}`:               "invalid escape",
		`{"a":"\u12"}`:             "invalid \\u escape",
		`{"a":"\u0000"}`:           `\u0000 is not allowed`,
		`{"\u0000":1}`:             `\u0000 is not allowed`,
		`{"a":"\ud800"}`:           "unpaired surrogate",
		`{"a":"\ud800x"}`:          "unpaired surrogate",
		`{"a":"\ud800\u0041"}`:     "unpaired surrogate",
		`{"a":"\udc00"}`:           "unpaired surrogate",
		"{\"a\":\"\xff\"}":         "invalid UTF-8",
		"{\"a\":\"\xed\xa0\x80\"}": "invalid UTF-8", // a surrogate encoded as UTF-8
		`{"a":1,"a":2}`:            "duplicate member name",
		`{"a":1,"\u0061":2}`:       "duplicate member name",
		`{"x":{"k":1,"k":{}}}`:     "duplicate member name",
		`{"a":1e1001}`:             "exponent beyond",
		`{"a":1e-99999999999}`:     "exponent beyond",
		`{"a":` + strings.Repeat("9", MaxDigits+1) + `}`: "digits",
		`{"a":` + tooDeep + `}`:                          "nested deeper",
	} {
		out, err := Compact([]byte("keep"), []byte(in))
		require.Error(t, err, in)
		require.Contains(t, err.Error(), msg, in)
		require.Equal(t, "keep", string(out), "dst unchanged on error")
		var pe *Error
		require.True(t, errors.As(err, &pe))
	}
}

func TestDuplicateNamesInBigObjects(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":1`)
	}
	ok := b.String() + "}"
	_, err := Compact(nil, []byte(ok))
	require.NoError(t, err)
	_, err = Compact(nil, []byte(b.String()+`,"k\u0078x":2}`))
	require.ErrorContains(t, err, `duplicate member name "kxx"`)
}

// FuzzCompact checks Compact against encoding/json: whatever it accepts is
// valid JSON and compacts to the same bytes; whatever encoding/json accepts
// as an object is accepted unless one of the documented rules refuses it.
func FuzzCompact(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, ` { "a" : [ 1 , "x" ] } `, `{"a":"\ud83d\ude00"}`, `{"a":1,"a":2}`,
		`{"a":"\u0000"}`, `[1]`, `{"a":1e5}`, `{"a":{"b":{"c":[null,true,false]}}}`, "{\"\xff\":1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Compact(nil, in)
		valid := json.Valid(in)
		if err == nil {
			if !valid {
				t.Fatalf("accepted invalid JSON %q", in)
			}
			var std bytes.Buffer
			if err := json.Compact(&std, in); err != nil || std.String() != string(got) {
				t.Fatalf("compacted %q to %q, encoding/json gives %q", in, got, std.String())
			}
			return
		}
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("error of type %T", err)
		}
		if valid && bytes.HasPrefix(bytes.TrimLeft(in, " \t\r\n"), []byte("{")) {
			for _, rule := range []string{"duplicate", `\u0000`, "surrogate", "UTF-8", "exponent", "digits", "nested"} {
				if strings.Contains(pe.Msg, rule) {
					return
				}
			}
			t.Fatalf("refused valid object %q: %v", in, err)
		}
	})
}

// Strings are scanned eight bytes at a time: whatever sits at any offset of
// a long string is found there, with the offset of the byte at fault.
func TestStringBytesAtEveryOffset(t *testing.T) {
	for at := range 20 {
		pre, post := strings.Repeat("a", at), strings.Repeat("b", 20-at)
		for mid, msg := range map[string]string{`\"`: "", `\\`: "", "\x7f": "", "é": "", "😀": "",
			"\x01": "control character", "\xff": "invalid UTF-8", `\x`: "invalid escape"} {
			in := `{"k":"` + pre + mid + post + `"}`
			out, err := Compact(nil, []byte(in))
			if msg == "" {
				require.NoError(t, err, in)
				require.Equal(t, in, string(out))
				continue
			}
			var pe *Error
			require.ErrorAs(t, err, &pe, in)
			require.Contains(t, pe.Msg, msg, in)
			require.Equal(t, len(`{"k":"`)+at, pe.Offset, in)
		}
	}
}

// Member names are checked for duplicates whatever their length, and
// however the bits that skip the check fall.
func TestDuplicateNamesOfEveryLength(t *testing.T) {
	for n := range 20 {
		name := `"` + strings.Repeat("n", n) + `"`
		in := `{"x":1,` + name + `:1,"y":2,` + name + `:3}`
		_, err := Compact(nil, []byte(in))
		require.ErrorContains(t, err, "duplicate member name", in)
	}
}

// FuzzMetadata: Metadata decodes exactly as json.Unmarshal does, error or
// not, whether or not its direct path reads the input.
func FuzzMetadata(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"a":"b"}`, `{"a": "b", "c": "d"}`, `{"a":"b","a":"c"}`,
		`{"a":"\u00e9"}`, `{"a":"é"}`, `{"a":1}`, `{"a":"b",}`, `{"a":"b"} x`, `null`, `[]`, `{"a":"b"`,
		"{\"a\":\"\xff\"}", `{"a":"\n"}`, "{\"a\":\"\t\"}", `{"producer":"bench","trace":"x-1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Metadata(b)
		var want map[string]string
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Metadata(%q) error %v, json.Unmarshal error %v", b, err, werr)
		}
		if err == nil && !maps.Equal(got, want) || (got == nil) != (want == nil) && err == nil {
			t.Fatalf("Metadata(%q) = %#v, json.Unmarshal %#v", b, got, want)
		}
	})
}
