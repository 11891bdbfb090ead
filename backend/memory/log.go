package memory

import (
	"math"
	"time"
	"unsafe"

	"github.com/rheo-go/rheo"
)

// chunkSize bounds how many events one chunk of a partition log holds, so
// that a growing log never copies what it already stores, and a trimmed log
// gives whole chunks back to the garbage collector.
const chunkSize = 4096

// Blocks hold the bytes of a chunk's events. A log's first block is small,
// each next one twice the last, up to maxBlock (or one event's size, if
// larger), so that a small stream stays small and a long one allocates
// rarely.
const (
	minBlock = 512
	maxBlock = 64 << 10
)

// record is an event as its partition log keeps it: the stream, partition
// and sequence follow from where it is, and its ID, type, key and payload
// are bytes in one of its chunk's blocks, one after the other. A record
// holds no pointer, so the garbage collector never scans the log: a store
// of millions of events costs a collection no more than an empty one.
type record struct {
	sec                  int64  // timestamp, Unix seconds (UTC)
	nsec                 uint32 // and nanoseconds
	blk, off             uint32 // block index in the chunk, and offset of the ID
	idN, typN, keyN, pay uint32 // lengths, in that order from off
}

// chunk is up to chunkSize consecutive records and the blocks holding
// their bytes. Blocks are only ever appended to within their capacity, so
// the strings and slices views make of them never change.
type chunk struct {
	recs   []record
	blocks [][]byte
	meta   map[int]map[string]string // by index in recs; nil while none has metadata
}

// plog is one partition's events, in fixed-size chunks aligned on
// multiples of chunkSize. Chunks wholly at or below trimmed are dropped.
type plog struct {
	stream  string
	part    int
	chunks  []*chunk
	off     int64 // sequence-1 of chunks[0].recs[0]
	n       int64 // high watermark
	trimmed int64 // highest removed sequence
	block   int   // capacity of the last block made
}

func (l *plog) len() int64 { return l.n }

// at returns the chunk and index of the record with sequence seq (1-based,
// above trimmed).
func (l *plog) at(seq int64) (*chunk, int) {
	i := seq - 1 - l.off
	return l.chunks[i/chunkSize], int(i % chunkSize)
}

// bytesOf returns the record's ID, type, key and payload, in one slice.
func (c *chunk) bytesOf(r *record) []byte {
	end := r.off + r.idN + r.typN + r.keyN + r.pay
	return c.blocks[r.blk][r.off:end:end]
}

// str views b as a string; b must never change.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// id returns the ID of the event with sequence seq.
func (l *plog) id(seq int64) string {
	c, i := l.at(seq)
	return c.id(i)
}

// id returns the ID of record i.
func (c *chunk) id(i int) string {
	r := &c.recs[i]
	return str(c.bytesOf(r)[:r.idN])
}

// view returns the event with sequence seq, sharing the store's payload
// and metadata: for reading only, never for a caller.
func (l *plog) view(seq int64) rheo.Event {
	c, i := l.at(seq)
	r := &c.recs[i]
	b := c.bytesOf(r)
	typ, key := r.idN+r.typN, r.idN+r.typN+r.keyN
	e := rheo.Event{ID: str(b[:r.idN]), Stream: l.stream, Partition: l.part, Sequence: seq,
		Type: str(b[r.idN:typ]), Key: str(b[typ:key]), Timestamp: time.Unix(r.sec, int64(r.nsec)).UTC(),
		Payload: b[key:len(b):len(b)]}
	if c.meta != nil {
		e.Metadata = c.meta[i]
	}
	return e
}

// event returns a copy of the event with sequence seq that callers cannot
// use to alter the stored one.
func (l *plog) event(seq int64) rheo.Event { return clone(l.view(seq)) }

// fits reports whether the log can keep e: each of its lengths, and their
// sum, must fit a record's 32 bits.
func fits(e *rheo.Event) bool {
	n := uint64(len(e.ID)) + uint64(len(e.Type)) + uint64(len(e.Key)) + uint64(len(e.Payload))
	return n <= math.MaxUint32
}

// append stores a copy of e's ID, type, key, timestamp and payload as the
// next event, which must fit; it keeps e's metadata map.
func (l *plog) append(e *rheo.Event) {
	if l.n%chunkSize == 0 {
		if len(l.chunks) == 0 {
			l.off = l.n
		}
		c := &chunk{}
		if l.n > 0 {
			c.recs = make([]record, 0, chunkSize) // the first chunk grows as a slice
		}
		l.chunks = append(l.chunks, c)
	}
	c := l.chunks[len(l.chunks)-1]
	size := len(e.ID) + len(e.Type) + len(e.Key) + len(e.Payload)
	last := len(c.blocks) - 1
	if last < 0 || cap(c.blocks[last])-len(c.blocks[last]) < size {
		l.block = min(max(2*l.block, minBlock), maxBlock)
		c.blocks = append(c.blocks, make([]byte, 0, max(l.block, size)))
		last++
	}
	b := c.blocks[last]
	off := len(b)
	b = append(b, e.ID...)
	b = append(b, e.Type...)
	b = append(b, e.Key...)
	b = append(b, e.Payload...)
	c.blocks[last] = b
	ts := e.Timestamp
	if len(e.Metadata) > 0 {
		if c.meta == nil {
			c.meta = map[int]map[string]string{}
		}
		c.meta[len(c.recs)] = e.Metadata
	}
	c.recs = append(c.recs, record{sec: ts.Unix(), nsec: uint32(ts.Nanosecond()), blk: uint32(last), off: uint32(off),
		idN: uint32(len(e.ID)), typN: uint32(len(e.Type)), keyN: uint32(len(e.Key)), pay: uint32(len(e.Payload))})
	l.n++
}

// trim removes the events through seq (trimmed < seq <= n), calling gone
// with each one's ID, and releases the chunks and blocks nothing references
// any more.
func (l *plog) trim(seq int64, gone func(id string)) {
	for s := l.trimmed + 1; s <= seq; s++ {
		c, i := l.at(s)
		gone(c.id(i))
		if c.meta != nil {
			delete(c.meta, i)
		}
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
		return
	}
	// Blocks before the one the first kept event starts in hold only
	// removed events; with none kept, every block of the last chunk does
	// (the next event starts a block of its own).
	c, release := l.chunks[0], len(l.chunks[0].blocks)
	if l.trimmed < l.n {
		var i int
		c, i = l.at(l.trimmed + 1)
		release = int(c.recs[i].blk)
	}
	clear(c.blocks[:release])
}

func newLogs(stream string, n int) []*plog {
	ls := make([]*plog, n)
	for i := range ls {
		ls[i] = &plog{stream: stream, part: i}
	}
	return ls
}
