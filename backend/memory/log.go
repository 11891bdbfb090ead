package memory

import "github.com/rheo-go/rheo"

// chunkSize bounds how many events one chunk of a partition log holds, so
// that a growing log never copies what it already stores, and a trimmed log
// gives whole chunks back to the garbage collector.
const chunkSize = 4096

// plog is one partition's events, in fixed-size chunks aligned on
// multiples of chunkSize. Chunks wholly at or below trimmed are dropped.
type plog struct {
	chunks  [][]rheo.Event
	off     int64 // sequence-1 of chunks[0][0]
	n       int64 // high watermark
	trimmed int64 // highest removed sequence
}

func (l *plog) len() int64 { return l.n }

// at returns the event with sequence seq (1-based, above trimmed).
func (l *plog) at(seq int64) *rheo.Event {
	i := seq - 1 - l.off
	return &l.chunks[i/chunkSize][i%chunkSize]
}

func (l *plog) append(e *rheo.Event) {
	if l.n%chunkSize == 0 {
		if len(l.chunks) == 0 {
			l.off = l.n
		}
		l.chunks = append(l.chunks, make([]rheo.Event, 0, chunkSize))
	}
	last := len(l.chunks) - 1
	l.chunks[last] = append(l.chunks[last], *e)
	l.n++
}

// trim removes the events through seq (trimmed < seq <= n), calling gone
// with each, and releases chunks nothing references any more.
func (l *plog) trim(seq int64, gone func(*rheo.Event)) {
	for s := l.trimmed + 1; s <= seq; s++ {
		e := l.at(s)
		gone(e)
		*e = rheo.Event{} // release payload and metadata now
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

func newLogs(n int) []*plog {
	ls := make([]*plog, n)
	for i := range ls {
		ls[i] = &plog{}
	}
	return ls
}
