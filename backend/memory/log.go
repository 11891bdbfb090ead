package memory

import (
	"encoding/json"
	"time"

	"github.com/rheo-go/rheo"
)

// chunkSize bounds how many events one chunk of a partition log holds, so
// that a growing log never copies what it already stores, and a trimmed log
// gives whole chunks back to the garbage collector.
const chunkSize = 4096

// record is an event as its partition log keeps it: the stream, partition
// and sequence follow from where it is, so a record is smaller than an
// Event and holds fewer pointers for the garbage collector to scan.
type record struct {
	id, typ, key string
	ts           time.Time
	payload      json.RawMessage
	meta         map[string]string
}

// plog is one partition's events, in fixed-size chunks aligned on
// multiples of chunkSize. Chunks wholly at or below trimmed are dropped.
type plog struct {
	stream  string
	part    int
	chunks  [][]record
	off     int64 // sequence-1 of chunks[0][0]
	n       int64 // high watermark
	trimmed int64 // highest removed sequence
}

func (l *plog) len() int64 { return l.n }

// at returns the record with sequence seq (1-based, above trimmed).
func (l *plog) at(seq int64) *record {
	i := seq - 1 - l.off
	return &l.chunks[i/chunkSize][i%chunkSize]
}

// view returns the event with sequence seq, sharing the store's payload
// and metadata: for reading only, never for a caller.
func (l *plog) view(seq int64) rheo.Event {
	r := l.at(seq)
	return rheo.Event{ID: r.id, Stream: l.stream, Partition: l.part, Sequence: seq, Type: r.typ, Key: r.key,
		Timestamp: r.ts, Payload: r.payload, Metadata: r.meta}
}

// event returns a copy of the event with sequence seq that callers cannot
// use to alter the stored one.
func (l *plog) event(seq int64) rheo.Event { return clone(l.view(seq)) }

// append stores e as the next event; it keeps e's payload and metadata.
func (l *plog) append(e *rheo.Event) {
	if l.n%chunkSize == 0 {
		if len(l.chunks) == 0 {
			l.off = l.n
		}
		l.chunks = append(l.chunks, make([]record, 0, chunkSize))
	}
	last := len(l.chunks) - 1
	l.chunks[last] = append(l.chunks[last], record{e.ID, e.Type, e.Key, e.Timestamp, e.Payload, e.Metadata})
	l.n++
}

// trim removes the events through seq (trimmed < seq <= n), calling gone
// with each, and releases chunks nothing references any more.
func (l *plog) trim(seq int64, gone func(*record)) {
	for s := l.trimmed + 1; s <= seq; s++ {
		r := l.at(s)
		gone(r)
		*r = record{} // release payload and metadata now
	}
	l.trimmed = seq
	for len(l.chunks) > 0 && l.off+chunkSize <= l.trimmed {
		l.chunks[0] = nil
		l.chunks = l.chunks[1:]
		l.off += chunkSize
	}
	if len(l.chunks) == 0 {
		l.chunks = nil // drop the old backing array
		l.off = l.n
	}
}

func newLogs(stream string, n int) []*plog {
	ls := make([]*plog, n)
	for i := range ls {
		ls[i] = &plog{stream: stream, part: i}
	}
	return ls
}
