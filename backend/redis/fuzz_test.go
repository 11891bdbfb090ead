package redis

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rheo-go/rheo"
)

// FuzzEntryRoundTrip packs an event with fuzzed fields into a stream entry
// and decodes it back: every field must come back byte for byte, whatever
// it contains (bytes that look like length prefixes, empty strings, times
// before 1970).
func FuzzEntryRoundTrip(f *testing.F) {
	f.Add("id", "type", "key", int64(1_767_000_000_000_000), "trace", "abc", []byte(`{"a":1}`))
	f.Add("", "\x05", "\x80\x80", int64(-1), "", "", []byte(``))
	f.Add("12:34", "3:abc", "k:9", int64(0), "\x00", "5:ab", []byte(`{"a":"1:2"}`))
	f.Fuzz(func(t *testing.T, id, typ, key string, ts int64, mk, mv string, payload []byte) {
		if id == "" {
			id = "x" // an entry always carries an event ID
		}
		if !utf8.ValidString(mk) || !utf8.ValidString(mv) {
			return // the facade refuses such metadata before it reaches a backend
		}
		want := rheo.Event{Stream: "s", Partition: 3, Sequence: 9, ID: id, Type: typ, Key: key,
			Timestamp: time.UnixMicro(ts).UTC(), Payload: payload, Metadata: map[string]string{mk: mv}}
		meta, err := encodeMeta(want.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		v := string(appendEntry(nil, want, meta))
		got, err := decodeEvent("s", 3, 9, []any{entryField, v})
		if err != nil {
			t.Fatalf("entry %q does not decode: %v", v, err)
		}
		if got.ID != want.ID || got.Type != want.Type || got.Key != want.Key || !got.Timestamp.Equal(want.Timestamp) ||
			!bytes.Equal(got.Payload, want.Payload) || !maps.Equal(got.Metadata, want.Metadata) {
			t.Fatalf("round trip of %+v gave %+v", want, got)
		}
	})
}

// FuzzDecodeEntry feeds arbitrary bytes to the entry decoders, as a
// corrupted or foreign entry of a rheo key would: they must return an
// error or an event with an ID, never panic.
func FuzzDecodeEntry(f *testing.F) {
	ok := string(appendEntry(nil, rheo.Event{ID: "a", Type: "t", Timestamp: time.UnixMicro(5)}, `{"k":"v"}`))
	f.Add(entryField, ok, "17-0")
	f.Add(entryField, ok[:len(ok)-3], "1-0")
	f.Add("id", "x", "x-0")
	f.Add("ts", "12a", "9")
	f.Add("meta", `{"a":`, "-1-0")
	f.Add(entryField, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "99999999999999999999-0")
	f.Fuzz(func(t *testing.T, field, value, entryID string) {
		e, err := decodeEvent("s", 0, 1, []any{field, value, "id", "fallback"})
		if err == nil && e.ID == "" {
			t.Fatalf("decoded an event without an ID from %q=%q", field, value)
		}
		if _, err := decodeEvent("s", 0, 1, []any{field, value}); err == nil && field != entryField && field != "id" {
			t.Fatalf("field %q alone decoded to an event", field)
		}
		evs, err := decodeEntries("s", 0, []any{[]any{entryID, []any{field, value}}})
		if err == nil && len(evs) != 1 {
			t.Fatalf("one entry decoded to %d events", len(evs))
		}
		if err == nil && evs[0].Sequence < 0 {
			t.Fatalf("entry ID %q decoded to sequence %d", entryID, evs[0].Sequence)
		}
	})
}

// FuzzDSN checks the DSN parser: it never panics, refuses bad input with
// ErrInvalidArgument, keeps key_prefix and query_scan_limit away from
// go-redis, and accepts no prefix that would break hash tags.
func FuzzDSN(f *testing.F) {
	for _, s := range []string{"redis://localhost:6379/0", "redis://u:p@h:1/2?key_prefix=app:&query_scan_limit=5",
		"rediss://h/0?key_prefix=%7B", "redis://h?query_scan_limit=-1", "redis://h?dial_timeout=3s&pool_size=4",
		"redis://[::1]:6379", "unix:///tmp/redis.sock?db=1", "redis://h:99999", "redis://h/x", "%zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		o, opts, err := parseDSN(dsn)
		if err != nil {
			if !errors.Is(err, rheo.ErrInvalidArgument) {
				t.Fatalf("parseDSN(%q): error %v is not ErrInvalidArgument", dsn, err)
			}
			return
		}
		if o == nil {
			t.Fatalf("parseDSN(%q) returned no options", dsn)
		}
		b := &Backend{prefix: DefaultKeyPrefix, scanLimit: DefaultQueryScanLimit}
		for _, opt := range opts {
			opt(b)
		}
		if strings.ContainsAny(b.prefix, "{}") || b.scanLimit < 0 {
			t.Fatalf("parseDSN(%q) accepted prefix %q and scan limit %d", dsn, b.prefix, b.scanLimit)
		}
	})
}

// The decoders must keep agreeing with the packed form's documented
// layout: a truncated entry is an error, not a shorter event.
func TestDecodeTruncatedEntry(t *testing.T) {
	full := string(appendEntry(nil, rheo.Event{ID: "abc", Type: "t", Key: "k", Timestamp: time.UnixMicro(1)}, `{"a":"b"}`))
	payloadStart := strings.Index(full, `{"a":"b"}`) + len(`{"a":"b"}`)
	for n := range payloadStart {
		if _, err := decodeEvent("s", 0, 1, []any{entryField, full[:n]}); err == nil {
			t.Fatalf("entry cut to %d of %d bytes decoded", n, len(full))
		}
	}
}

// The wait options come from the DSN, and bad values are refused.
func TestDSNWaitReplicas(t *testing.T) {
	_, opts, err := parseDSN("redis://h:1/0?wait_replicas=2&wait_timeout=250ms&key_prefix=x:")
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{}
	for _, o := range opts {
		o(b)
	}
	if n, d := b.WaitReplicas(); n != 2 || d != 250*time.Millisecond {
		t.Fatalf("WaitReplicas() = %d, %s", n, d)
	}
	for _, dsn := range []string{"redis://h?wait_replicas=-1", "redis://h?wait_replicas=x", "redis://h?wait_replicas=1&wait_timeout=soon",
		"redis://h?wait_timeout=1s"} {
		if _, _, err := parseDSN(dsn); !errors.Is(err, rheo.ErrInvalidArgument) {
			t.Fatalf("parseDSN(%q) = %v, want ErrInvalidArgument", dsn, err)
		}
	}
}

// FuzzDSNRedaction checks that a DSN which does not parse never echoes its
// password, or any part of it, in the error parseDSN returns. The password
// starts with a marker found nowhere else, so that any echo of it shows.
func FuzzDSNRedaction(f *testing.F) {
	f.Add("u", "s3cret-pw", "h:x/0")
	f.Add("?", "000000", "0:0/0?0")
	f.Add("u@", "s3cret@pw", "h/d?db=z")
	f.Add("u", "s3cret pw", "h:6379/0")
	f.Fuzz(func(t *testing.T, user, password, rest string) {
		const marker = "Pw0rdMark"
		if strings.Contains(user+rest, marker) {
			return
		}
		dsn := "redis://" + user + ":" + marker + password + "@" + rest
		if _, _, err := parseDSN(dsn); err != nil && strings.Contains(err.Error(), marker) {
			t.Fatalf("DSN %q: error %q shows the password", dsn, err)
		}
	})
}

// The driver does not retry commands unless the DSN asks it to: a retried
// write whose first try landed would answer for the second.
func TestDSNDriverRetriesOff(t *testing.T) {
	o, _, err := parseDSN("redis://h:1/0")
	if err != nil || o.MaxRetries != -1 {
		t.Fatalf("parseDSN: MaxRetries %d, err %v; want -1 (no driver retries)", o.MaxRetries, err)
	}
	o, _, err = parseDSN("redis://h:1/0?max_retries=3")
	if err != nil || o.MaxRetries != 3 {
		t.Fatalf("parseDSN with max_retries=3: MaxRetries %d, err %v", o.MaxRetries, err)
	}
}
