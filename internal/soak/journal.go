// Package soak runs rheo's soak: a producer and worker processes on one
// group of a real store under a chaos loop (SIGKILLed workers, network
// faults), an append-only journal of everything each process saw, and a
// checker that proves from the journals and the store that nothing was lost,
// no stale settle succeeded and the frontier never passed an unsettled event.
//
// TestSoak drives it; it runs only when asked (-soak DURATION or RHEO_SOAK).
package soak

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Record kinds.
const (
	KindAppend  = "append"  // the producer's append succeeded
	KindDeliver = "deliver" // a handler ran (written before it returns)
	KindSettle  = "settle"  // the consumer runtime reported a settle's result
	KindLost    = "lost"    // a renewal found the lease taken
)

// Handler decisions (Record.Outcome of a delivery) and settle kinds
// (Record.Outcome of a settle).
const (
	OutcomeAck    = "ack"
	OutcomeReject = "reject"
	OutcomeRetry  = "retry" // a nack
)

// Settle results (Record.Result), after rheo.Classify.
const (
	ResultOK      = "ok"
	ResultLost    = "lost"
	ResultUnknown = "unknown"
	ResultFailed  = "failed"
)

// Record is one line of a journal.
type Record struct {
	Kind      string `json:"k"`
	Event     string `json:"e"`
	N         int64  `json:"n,omitempty"` // the event's payload number
	Partition int    `json:"p,omitempty"`
	Seq       int64  `json:"s,omitempty"`
	Lease     string `json:"l,omitempty"`
	Attempt   int    `json:"a,omitempty"`
	Worker    string `json:"w,omitempty"` // the worker process incarnation
	Outcome   string `json:"o,omitempty"`
	Result    string `json:"r,omitempty"`
	Err       string `json:"x,omitempty"`
	T         int64  `json:"t"` // wall clock, Unix nanoseconds
}

// Time is the record's time.
func (r Record) Time() time.Time { return time.Unix(0, r.T) }

// Journal appends records to a file, one line per write(2) on a file opened
// with O_APPEND, so that a process killed at any moment leaves every record
// it wrote whole (at most a torn last line, which ReadJournal skips) and
// several writers never interleave inside a line.
type Journal struct {
	mu sync.Mutex
	f  *os.File
}

// OpenJournal opens (creating) the journal at path for appending.
func OpenJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("soak: open journal: %w", err)
	}
	return &Journal{f: f}, nil
}

// Write appends r with the current time when r.T is 0.
func (j *Journal) Write(r Record) error {
	if r.T == 0 {
		r.T = time.Now().UnixNano()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.f.Write(b)
	return err
}

// Close closes the file.
func (j *Journal) Close() error { return j.f.Close() }

// ReadJournal reads every whole record of the journal at path. A last line
// without its newline (a process killed mid-write) is skipped; any other
// malformed line is an error naming the file and line.
func ReadJournal(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // a worker killed before it wrote anything
		}
		return nil, fmt.Errorf("soak: read journal: %w", err)
	}
	defer f.Close()
	var out []Record
	r := bufio.NewReaderSize(f, 64<<10)
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) { // b is a torn last line, or empty
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("soak: read journal %s: %w", path, err)
		}
		var rec Record
		if jerr := json.Unmarshal(b, &rec); jerr != nil {
			return nil, fmt.Errorf("soak: journal %s line %d: %w", path, line, jerr)
		}
		out = append(out, rec)
	}
}
