package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
)

// maxInputLine bounds one stdin line of append; the client's event size
// limit (1 MiB by default) rejects big events with a clear message first.
const maxInputLine = 16 << 20

// appendSummaryAbove is how many appended events a table still lists one by
// one; above it, append prints a summary per partition.
const appendSummaryAbove = 20

func (a *app) appendCommand() *cobra.Command {
	var (
		typ, key, id string
		part         int
		meta         []string
	)
	cmd := &cobra.Command{
		Use:   "append STREAM [PAYLOAD]",
		Short: "Append events: one payload argument, or one JSON object per line of stdin",
		Long: `Append events to a stream. The payload (a JSON object) is the argument, or
else stdin is read with one JSON object per line (blank lines are skipped).
--type, --key, --partition and --meta apply to every event. Stdin input is
appended in atomic batches of up to 10,000 events.

A stdin line may also be an envelope: an object with a "payload" member and
no members other than "id", "type", "key", "partition", "metadata" and
"payload". Its fields win over the flags for that event. Every line is
validated (JSON, names, sizes, partitions, duplicate IDs) before anything is
written, and an error names the line; re-running a file whose envelopes carry
IDs appends nothing new.`,
		Example: `  rheo append orders '{"order_id":"o-1","total":42}' --type order_placed --key cust-1
  rheo append orders --type order_placed --meta producer=shop < orders.jsonl`,
		Args: cobra.RangeArgs(1, 2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			stream := args[0]
			if err := a.requireLastingStore(cmd.Name()); err != nil {
				return err // before stdin is read
			}
			if cmd.Flags().Changed("id") && id == "" {
				return usagef("append: --id is empty: give an event ID, or leave the flag out for a new UUIDv7")
			}
			metadata, err := parseKV("meta", meta)
			if err != nil {
				return err
			}
			var lines []inputLine
			if len(args) == 2 {
				if args[1] == "" {
					return usagef("append: the payload argument is empty (pass a JSON object such as '{}', or omit it to read stdin)")
				}
				lines = []inputLine{{n: 0, raw: json.RawMessage(args[1])}}
			} else if lines, err = readLines(a.stdin); err != nil {
				return err
			}
			if len(lines) == 0 {
				return usagef("append: no payload given (pass a JSON object, or one per line on stdin)")
			}
			if id != "" && len(lines) > 1 {
				return usagef("append: --id names one event but %d payloads were given", len(lines))
			}
			msgs := make([]rheo.Message, len(lines))
			for i, l := range lines {
				msgs[i] = rheo.Message{ID: id, Type: typ, Key: key, Payload: l.raw, Metadata: metadata}
				if cmd.Flags().Changed("partition") {
					msgs[i].Partition = &part
				}
				if l.env != nil {
					l.env.apply(&msgs[i])
				}
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				if err := validateLines(ctx, c, stream, lines, msgs); err != nil {
					return err
				}
				var all []rheo.Event
				for chunk := range slices.Chunk(msgs, rheo.MaxLimit) {
					evs, err := c.AppendBatch(ctx, stream, chunk)
					if err != nil {
						if len(all) > 0 {
							return fmt.Errorf("after appending %d events: %w", len(all), err)
						}
						return err
					}
					all = append(all, evs...)
				}
				if a.jsonOut {
					return writeJSON(a.stdout, eventsJSON(all))
				}
				if len(all) <= appendSummaryAbove {
					t := newTable(a.stdout, "PARTITION", "SEQ", "ID", "TYPE", "KEY")
					for _, e := range all {
						t.row(e.Partition, e.Sequence, e.ID, dash(e.Type), dash(e.Key))
					}
					return t.flush()
				}
				fmt.Fprintf(a.stdout, "appended %s to %s\n", plural(len(all), "event"), stream)
				t := newTable(a.stdout, "PARTITION", "EVENTS", "SEQ")
				for _, r := range seqRanges(all) {
					t.row(r.partition, r.count, fmt.Sprintf("%d..%d", r.first, r.last))
				}
				return t.flush()
			})
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&typ, "type", "", "event type")
	fs.StringVar(&key, "key", "", "event key (routes to a partition by hash)")
	fs.IntVar(&part, "partition", 0, "explicit partition (wins over --key)")
	fs.StringArrayVar(&meta, "meta", nil, "metadata key=value (repeatable)")
	fs.StringVar(&id, "id", "", "event ID (the idempotency key; default a new UUIDv7)")
	return cmd
}

// inputLine is one event of append's input: its stdin line number (0 for
// the argument), the raw JSON, and the envelope when the line is one.
type inputLine struct {
	n   int
	raw json.RawMessage
	env *envelope
}

// envelope is a stdin line that carries an event's fields with its payload.
type envelope struct {
	ID        *string           `json:"id"`
	Type      *string           `json:"type"`
	Key       *string           `json:"key"`
	Partition *int              `json:"partition"`
	Metadata  map[string]string `json:"metadata"`
	Payload   json.RawMessage   `json:"payload"`
}

var envelopeKeys = map[string]bool{"id": true, "type": true, "key": true, "partition": true, "metadata": true, "payload": true}

// parseEnvelope returns the envelope a line holds, or nil when the line is
// a bare payload (not an object with "payload" and only envelope members).
func parseEnvelope(b []byte) (*envelope, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return nil, nil // not an object: the facade says what is wrong
	}
	if _, ok := members["payload"]; !ok {
		return nil, nil
	}
	for k := range members {
		if !envelopeKeys[k] {
			return nil, nil
		}
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("envelope member %q must be %s, not a JSON %s", te.Field, jsonKind(te.Type), te.Value)
		}
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return &e, nil
}

// jsonKind names, in JSON's terms, what a Go type of an envelope member
// takes.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Map:
		return "an object of strings"
	}
	return "a " + t.String()
}

// apply sets m's fields from the envelope's.
func (e *envelope) apply(m *rheo.Message) {
	m.Payload = e.Payload
	if e.ID != nil {
		m.ID = *e.ID
	}
	if e.Type != nil {
		m.Type = *e.Type
	}
	if e.Key != nil {
		m.Key = *e.Key
	}
	if e.Partition != nil {
		m.Partition = e.Partition
	}
	if e.Metadata != nil {
		m.Metadata = e.Metadata
	}
}

// validateLines checks every message as the append would, before anything
// is written, naming the failing line.
func validateLines(ctx context.Context, c *rheo.Client, stream string, lines []inputLine, msgs []rheo.Message) error {
	seen := map[string]int{}
	for i, m := range msgs {
		where := "the payload"
		if lines[i].n > 0 {
			where = fmt.Sprintf("stdin line %d", lines[i].n)
		}
		if m.ID != "" {
			if first, dup := seen[m.ID]; dup {
				return fmt.Errorf("%s: event ID %q already given on line %d; nothing was appended", where, m.ID, first)
			}
			seen[m.ID] = lines[i].n
		}
		if _, err := c.PrepareAppend(ctx, stream, msgs[i:i+1]); err != nil {
			if i == 0 && (errors.Is(err, rheo.ErrStreamNotFound) || errors.Is(err, rheo.ErrBackendUnavailable) ||
				errors.Is(err, rheo.ErrMisconfigured) || errors.Is(err, rheo.ErrAmbiguous)) {
				return err
			}
			return fmt.Errorf("%s: %w; nothing was appended", where, err)
		}
	}
	return nil
}

// readLines reads one JSON payload or envelope per non-blank line.
func readLines(r io.Reader) ([]inputLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxInputLine)
	var out []inputLine
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if !json.Valid(b) {
			return nil, fmt.Errorf("stdin line %d is not valid JSON: %.60s", line, b)
		}
		b = bytes.Clone(b)
		env, err := parseEnvelope(b)
		if err != nil {
			return nil, fmt.Errorf("stdin line %d: %w", line, err)
		}
		out = append(out, inputLine{n: line, raw: json.RawMessage(b), env: env})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("stdin line %d is longer than %d MiB, the most one line may hold; nothing was appended", line+1, maxInputLine>>20)
		}
		return nil, fmt.Errorf("reading stdin after line %d: %w", line, err)
	}
	return out, nil
}

type seqRange struct {
	partition, count int
	first, last      int64
}

// seqRanges summarises appended events per partition.
func seqRanges(evs []rheo.Event) []seqRange {
	byPart := map[int]*seqRange{}
	for _, e := range evs {
		r, ok := byPart[e.Partition]
		if !ok {
			r = &seqRange{partition: e.Partition, first: e.Sequence, last: e.Sequence}
			byPart[e.Partition] = r
		}
		r.count++
		r.first = min(r.first, e.Sequence)
		r.last = max(r.last, e.Sequence)
	}
	out := make([]seqRange, 0, len(byPart))
	for _, r := range byPart {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(x, y seqRange) int { return x.partition - y.partition })
	return out
}

func (a *app) queryCommand() *cobra.Command {
	q := queryFlags{withPartitions: true, paged: true}
	cmd := &cobra.Command{
		Use:   "query STREAM",
		Short: "Search a stream's log (never changes any group)",
		Long: `Search a stream by type, key, partition, metadata, payload fields, time window
and sequence range. Results come in sequence order unless --order says
otherwise; in sequence order a page that fills --limit ends with the cursor of
the next page.`,
		Example: `  rheo query orders --type order_placed --field customer.country=NL
  rheo query orders --meta correlation_id=c-7 --from 2026-01-02T00:00:00Z --limit 10
  rheo query orders --order timestamp:desc --limit 5
  rheo query orders --limit 100 --cursor c1.eyIwIjoxMDB9`,
		Args: cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			query, err := q.build(args[0])
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				var (
					page rheo.Page
					err  error
				)
				if pagedOrder(query.OrderBy) {
					page, err = c.QueryPage(ctx, query)
				} else {
					page.Events, err = c.Query(ctx, query)
				}
				if err != nil {
					return err
				}
				if a.jsonOut {
					return writeJSON(a.stdout, struct {
						Events     []eventJSON `json:"events"`
						NextCursor string      `json:"next_cursor"`
					}{eventsJSON(page.Events), page.NextCursor})
				}
				if err := a.writeEvents(a.stdout, page.Events); err != nil {
					return err
				}
				if page.NextCursor != "" {
					fmt.Fprintf(a.stdout, "next page: --cursor %s\n", page.NextCursor)
				}
				return nil
			})
		}),
	}
	q.register(cmd.Flags())
	return cmd
}

// pagedOrder reports whether an order allows cursor paging (sequence order).
func pagedOrder(o []rheo.Order) bool {
	switch len(o) {
	case 0:
		return true
	case 1:
		return o[0] == rheo.Asc(rheo.OrderSequence)
	case 2:
		return o[0] == rheo.Asc(rheo.OrderSequence) && o[1] == rheo.Asc(rheo.OrderPartition)
	}
	return false
}

// tailBatch is how many events one poll reads per partition.
const tailBatch = 1000

func (a *app) tailCommand() *cobra.Command {
	var (
		partitions    []int
		fromBeginning bool
		interval      time.Duration
		limit         int
	)
	cmd := &cobra.Command{
		Use:   "tail STREAM",
		Short: "Follow new events as they are appended (never changes any group)",
		Long: `Print events as they are appended, until interrupted (Ctrl-C) or --limit
events have been printed. It reads each partition in order and polls every
--interval; it holds no lease and changes no group. --from-beginning prints
the existing events first. With --json it prints one JSON object per line.`,
		Example: "  rheo tail orders\n  rheo tail orders --from-beginning --json | jq .payload",
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usagef("tail: --interval %v must be positive", interval)
			}
			if limit < 0 {
				return usagef("tail: --limit %d is negative", limit)
			}
			err := a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				return a.tail(ctx, c, args[0], partitions, fromBeginning, interval, limit)
			})
			if err != nil && cmd.Context().Err() != nil {
				// Interrupted: stopping is what the user asked for.
				return nil
			}
			return err
		}),
	}
	fs := cmd.Flags()
	fs.IntSliceVar(&partitions, "partition", nil, "follow only these partitions (repeatable; default all)")
	fs.BoolVar(&fromBeginning, "from-beginning", false, "print the existing events first")
	fs.DurationVar(&interval, "interval", 200*time.Millisecond, "how often to poll for new events")
	fs.IntVar(&limit, "limit", 0, "stop after printing this many events (0: never)")
	return cmd
}

// tail prints the stream's events as they come, polling each partition.
func (a *app) tail(ctx context.Context, c *rheo.Client, stream string, partitions []int, fromBeginning bool, interval time.Duration, limit int) error {
	parts, err := tailPartitions(ctx, c, stream, partitions)
	if err != nil {
		return err
	}
	after := make(map[int]int64, len(parts))
	if !fromBeginning {
		for _, p := range parts {
			last, err := c.Query(ctx, rheo.Query{Stream: stream, Partitions: []int{p},
				OrderBy: []rheo.Order{rheo.Desc(rheo.OrderSequence)}, Limit: 1})
			if err != nil {
				return err
			}
			if len(last) > 0 {
				after[p] = last[0].Sequence
			}
		}
	}
	printed := 0
	enc := json.NewEncoder(a.stdout)
	for {
		got := 0
		for _, p := range parts {
			evs, err := c.Read(ctx, stream, rheo.ReadOptions{Partition: p, After: after[p], Limit: tailBatch})
			if err != nil {
				return err
			}
			for _, e := range evs {
				if a.jsonOut {
					if err := enc.Encode(toEventJSON(e)); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(a.stdout, "%s  p%d #%d  %s  type=%s key=%s  %s\n",
						fmtTime(e.Timestamp), e.Partition, e.Sequence, e.ID, dash(e.Type), dash(e.Key), e.Payload)
				}
				after[p] = e.Sequence
				printed++
				got++
				if limit > 0 && printed >= limit {
					return nil
				}
			}
		}
		if got > 0 {
			continue
		}
		tick := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil
		case <-tick.C:
		}
	}
}

// tailPartitions resolves the partitions to follow (all when none given).
func tailPartitions(ctx context.Context, c *rheo.Client, stream string, given []int) ([]int, error) {
	streams, err := c.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range streams {
		if s.Name != stream {
			continue
		}
		if len(given) == 0 {
			all := make([]int, s.Partitions)
			for i := range all {
				all[i] = i
			}
			return all, nil
		}
		out := slices.Clone(given)
		slices.Sort(out)
		out = slices.Compact(out)
		for _, p := range out {
			if p < 0 || p >= s.Partitions {
				return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, stream, s.Partitions)
			}
		}
		return out, nil
	}
	return nil, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", stream)
}
