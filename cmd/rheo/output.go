package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rheo-go/rheo"
)

// tableTime is how tables print instants: UTC, milliseconds, sortable.
const tableTime = "2006-01-02T15:04:05.000Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(tableTime)
}

// table writes aligned columns; call flush when done.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(anySlice(header)...)
	}
	return t
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func (t *table) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, c)
	}
	fmt.Fprint(t.tw, "\n")
}

func (t *table) flush() error { return t.tw.Flush() }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeResult prints what a command did: v as JSON, or else one line of
// text from format and args.
func (a *app) writeResult(v any, format string, args ...any) error {
	if a.jsonOut {
		return writeJSON(a.stdout, v)
	}
	fmt.Fprintf(a.stdout, format+"\n", args...)
	return nil
}

// eventJSON is the stable JSON shape of an event for scripts.
type eventJSON struct {
	ID        string            `json:"id"`
	Stream    string            `json:"stream"`
	Partition int               `json:"partition"`
	Sequence  int64             `json:"sequence"`
	Type      string            `json:"type"`
	Key       string            `json:"key"`
	Timestamp time.Time         `json:"timestamp"`
	Payload   json.RawMessage   `json:"payload"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

func toEventJSON(e rheo.Event) eventJSON {
	return eventJSON{ID: e.ID, Stream: e.Stream, Partition: e.Partition, Sequence: e.Sequence,
		Type: e.Type, Key: e.Key, Timestamp: e.Timestamp, Payload: e.Payload, Metadata: e.Metadata}
}

func (j eventJSON) event() rheo.Event {
	return rheo.Event{ID: j.ID, Stream: j.Stream, Partition: j.Partition, Sequence: j.Sequence,
		Type: j.Type, Key: j.Key, Timestamp: j.Timestamp, Payload: j.Payload, Metadata: j.Metadata}
}

func eventsJSON(evs []rheo.Event) []eventJSON {
	out := make([]eventJSON, len(evs))
	for i, e := range evs {
		out[i] = toEventJSON(e)
	}
	return out
}

// leaseJSON carries a whole lease between processes (the demo's workers)
// and to scripts; it round-trips exactly.
type leaseJSON struct {
	ID         string    `json:"id"`
	Receipt    string    `json:"receipt"`
	Stream     string    `json:"stream"`
	Group      string    `json:"group"`
	ConsumerID string    `json:"consumer_id"`
	Attempt    int       `json:"attempt"`
	LeasedAt   time.Time `json:"leased_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Event      eventJSON `json:"event"`
}

func toLeaseJSON(l rheo.Lease) leaseJSON {
	return leaseJSON{ID: l.ID, Receipt: l.Receipt, Stream: l.Stream, Group: l.Group,
		ConsumerID: l.ConsumerID, Attempt: l.Attempt, LeasedAt: l.LeasedAt, ExpiresAt: l.ExpiresAt,
		Event: toEventJSON(l.Event)}
}

func (j leaseJSON) lease() rheo.Lease {
	return rheo.Lease{ID: j.ID, Receipt: j.Receipt, Stream: j.Stream, Group: j.Group,
		ConsumerID: j.ConsumerID, Attempt: j.Attempt, LeasedAt: j.LeasedAt, ExpiresAt: j.ExpiresAt,
		Event: j.Event.event()}
}

// writeEvents prints events as a table or JSON.
func (a *app) writeEvents(w io.Writer, evs []rheo.Event) error {
	if a.jsonOut {
		return writeJSON(w, eventsJSON(evs))
	}
	t := newTable(w, "PARTITION", "SEQ", "ID", "TYPE", "KEY", "TIMESTAMP", "PAYLOAD", "METADATA")
	for _, e := range evs {
		t.row(eventCells(e)...)
	}
	return t.flush()
}

func eventCells(e rheo.Event) []any {
	return []any{e.Partition, e.Sequence, e.ID, dash(e.Type), dash(e.Key), fmtTime(e.Timestamp),
		string(e.Payload), fmtMeta(e.Metadata)}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtMeta prints metadata as sorted k=v pairs.
func fmtMeta(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// errCode names a rheo error the way the seeds speak of them
// (stale_lease, receipt_mismatch, …); "ok" for nil.
func errCode(err error) string {
	codes := []struct {
		err  error
		code string
	}{
		{rheo.ErrStaleLease, "stale_lease"},
		{rheo.ErrReceiptMismatch, "receipt_mismatch"},
		{rheo.ErrStreamNotFound, "stream_not_found"},
		{rheo.ErrGroupNotFound, "group_not_found"},
		{rheo.ErrAlreadyExists, "already_exists"},
		{rheo.ErrInvalidPartition, "invalid_partition"},
		{rheo.ErrInvalidArgument, "invalid_argument"},
		{rheo.ErrCursorNotFound, "cursor_not_found"},
		{rheo.ErrConfirmRequired, "confirm_required"},
		{rheo.ErrNoEventsInRange, "no_events_in_range"},
		{rheo.ErrUnsupported, "unsupported"},
		{rheo.ErrBackendUnavailable, "backend_unavailable"},
		{rheo.ErrAmbiguous, "ambiguous"},
		{rheo.ErrClosed, "closed"},
	}
	if err == nil {
		return "ok"
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "error"
}

// plural writes n and the noun, with an s unless n is 1.
func plural[N int | int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
