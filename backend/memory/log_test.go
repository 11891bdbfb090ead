package memory

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// The log's records and chunks' record arrays hold no pointer, so a
// collection never scans them, however many events a store keeps.
func TestRecordHoldsNoPointer(t *testing.T) {
	rt := reflect.TypeFor[record]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		switch f.Type.Kind() {
		case reflect.Int64, reflect.Uint32:
		default:
			t.Errorf("record.%s is a %s: a record must hold no pointer", f.Name, f.Type)
		}
	}
}

func logEvent(i int, payload string) rheo.Event {
	return rheo.Event{ID: fmt.Sprintf("e-%d", i), Type: "t", Key: fmt.Sprint(i % 7),
		Timestamp: time.Date(2026, 12, 4, 10, 0, 0, i, time.FixedZone("X", 3600)),
		Payload:   []byte(`{"i":` + fmt.Sprint(i) + `,"p":"` + payload + `"}`)}
}

// A log keeps copies of what it is given, gives each event back as it was
// (its time in UTC), and a trim lets go of the blocks that hold only
// removed events while the kept ones read the same.
func TestLogKeepsCopiesAndTrimReleasesBlocks(t *testing.T) {
	l := newLogs("s", 1)[0]
	pad := strings.Repeat("x", 1000)
	const n = 3 * chunkSize / 2
	for i := range n {
		e := logEvent(i, pad)
		if i%3 == 0 {
			e.Metadata = map[string]string{"i": fmt.Sprint(i)}
		}
		l.append(&e)
		e.Payload[0] = '[' // the caller's bytes are the caller's
	}
	check := func(from int) {
		t.Helper()
		for i := from; i < n; i++ {
			want := logEvent(i, pad)
			got := l.view(int64(i + 1))
			require.Equal(t, want.ID, got.ID)
			require.Equal(t, want.Type, got.Type)
			require.Equal(t, want.Key, got.Key)
			require.Equal(t, string(want.Payload), string(got.Payload))
			require.True(t, want.Timestamp.Equal(got.Timestamp))
			require.Equal(t, time.UTC, got.Timestamp.Location())
			require.Equal(t, int64(i+1), got.Sequence)
			if i%3 == 0 {
				require.Equal(t, map[string]string{"i": fmt.Sprint(i)}, got.Metadata)
			} else {
				require.Nil(t, got.Metadata)
			}
		}
	}
	check(0)
	require.Len(t, l.chunks, 2)
	blocks := len(l.chunks[0].blocks)
	require.Greater(t, blocks, 10, "1 KiB events fill many blocks")

	var gone []string
	through := int64(chunkSize / 2)
	l.trim(through, func(id string) { gone = append(gone, id) })
	require.Len(t, gone, int(through))
	require.Equal(t, "e-0", gone[0])
	check(int(through))
	c, i := l.at(through + 1)
	first := int(c.recs[i].blk)
	require.Greater(t, first, 0)
	for b, blk := range c.blocks {
		require.Equal(t, b < first, blk == nil, "block %d of %d (first kept event in %d)", b, len(c.blocks), first)
	}
	for k := range c.meta {
		require.GreaterOrEqual(t, k, int(through), "removed events' metadata goes")
	}

	l.trim(chunkSize+10, func(string) {})
	require.Len(t, l.chunks, 1, "a wholly trimmed chunk goes")
	check(chunkSize + 10)
	l.trim(n, func(string) {})
	require.Len(t, l.chunks, 1, "the last chunk stays for the events to come")
	for _, blk := range l.chunks[0].blocks {
		require.Nil(t, blk, "with every event removed, every block goes")
	}
	e := logEvent(n, pad)
	l.append(&e)
	require.Equal(t, string(e.Payload), string(l.view(n+1).Payload))
}

// A log of small events stays small: its first chunk and blocks grow with
// it rather than being made whole at the first event.
func TestSmallLogStaysSmall(t *testing.T) {
	l := newLogs("s", 1)[0]
	e := logEvent(1, "")
	l.append(&e)
	c := l.chunks[0]
	require.LessOrEqual(t, cap(c.recs), 8)
	require.Equal(t, minBlock, cap(c.blocks[0]))
}

// BenchmarkCollectionOfALargeStore reports how long a full collection takes
// with a store of a million ~100-byte events in memory.
func BenchmarkCollectionOfALargeStore(b *testing.B) {
	s := newLogs("s", 4)
	for i := range 1000000 {
		e := logEvent(i, strings.Repeat("x", 80))
		s[i%4].append(&e)
	}
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(s)
}
