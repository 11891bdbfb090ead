package memory

import "github.com/rheo-go/rheo"

// chunkSize bounds how many events one chunk of a partition log holds, so
// that a growing log never copies what it already stores.
const chunkSize = 4096

// plog is one partition's events, in fixed-size chunks.
type plog struct {
	chunks [][]rheo.Event
	n      int64
}

func (l *plog) len() int64 { return l.n }

// at returns the event with sequence seq (1-based).
func (l *plog) at(seq int64) *rheo.Event {
	i := seq - 1
	return &l.chunks[i/chunkSize][i%chunkSize]
}

func (l *plog) append(e rheo.Event) {
	if l.n%chunkSize == 0 {
		l.chunks = append(l.chunks, make([]rheo.Event, 0, chunkSize))
	}
	last := len(l.chunks) - 1
	l.chunks[last] = append(l.chunks[last], e)
	l.n++
}

func newLogs(n int) []*plog {
	ls := make([]*plog, n)
	for i := range ls {
		ls[i] = &plog{}
	}
	return ls
}
