package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/postgres"
)

func (a *app) migrateCommand() *cobra.Command {
	var printSQL, payloadIndex bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the store's schema (idempotent)",
		Long: `Create or upgrade the store's schema and indexes. Running it again is a no-op.
Embedded stores (memory:, sqlite:) are migrated by every command; shared stores
(postgres://, redis://, mongodb://) only by this one.

--print writes the schema SQL instead, without connecting, for applying
migrations with your own tool (PostgreSQL only: one idempotent script, to run
in a single transaction; the rheo_schema DSN parameter picks the schema).

--payload-index (PostgreSQL only) also builds the GIN index that payload and
metadata filters use, without blocking appends; with --print, its statement
follows the script, to run outside a transaction. Without the index those
filters read the stream's events, and appends are faster.`,
		Example: "  rheo migrate --dsn postgres://rheo@db/rheo\n  rheo migrate --payload-index --dsn postgres://rheo@db/rheo\n  rheo migrate --print --dsn 'postgres://rheo@db/rheo?rheo_schema=events' > rheo.sql",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if scheme, _, _ := strings.Cut(a.storeDSN(), ":"); payloadIndex && scheme != "postgres" && scheme != "postgresql" {
				return fmt.Errorf("migrate --payload-index: the %s: backend has no payload index (only postgres:// has; other stores' payload filters read the stream)", scheme)
			}
			if printSQL {
				return a.printMigration(payloadIndex)
			}
			c, err := a.open(ctx, a.storeDSN())
			if err != nil {
				return fmt.Errorf("open %s: %w", redact(a.storeDSN()), err)
			}
			defer c.Close()
			if err := c.Migrate(ctx); err != nil {
				return err
			}
			if payloadIndex {
				pb, ok := c.Backend().(*postgres.Backend)
				if !ok {
					return fmt.Errorf("migrate --payload-index: the store is not PostgreSQL")
				}
				if err := pb.CreatePayloadIndex(ctx); err != nil {
					return err
				}
			}
			out, line := map[string]any{"migrated": true, "dsn": redact(a.storeDSN())}, "migrated "+redact(a.storeDSN())
			if payloadIndex {
				out["payload_index"], line = true, line+"; the payload index is built"
			}
			if a.jsonOut {
				return writeJSON(a.stdout, out)
			}
			fmt.Fprintln(a.stdout, line)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&printSQL, "print", false, "print the schema SQL (PostgreSQL) instead of migrating")
	cmd.Flags().BoolVar(&payloadIndex, "payload-index", false, "also build the GIN index of payloads and metadata (PostgreSQL)")
	return cmd
}

// printMigration writes the SQL that migrate would run, for the backends
// that have one.
func (a *app) printMigration(payloadIndex bool) error {
	dsn := a.storeDSN()
	scheme, _, _ := strings.Cut(dsn, ":")
	switch scheme {
	case "postgres", "postgresql":
		sql, err := postgres.MigrationSQLForDSN(dsn)
		if err != nil {
			return err
		}
		if payloadIndex {
			idx, err := postgres.PayloadIndexSQLForDSN(dsn)
			if err != nil {
				return err
			}
			sql += "-- The payload and metadata index; outside a transaction (CREATE INDEX CONCURRENTLY).\n" + idx + ";\n"
		}
		if a.jsonOut {
			return writeJSON(a.stdout, map[string]any{"dsn": redact(dsn), "sql": sql})
		}
		_, err = io.WriteString(a.stdout, sql)
		return err
	default:
		return fmt.Errorf("migrate --print: the %s: backend has no SQL to print (only postgres:// has); run rheo migrate against it instead", scheme)
	}
}

func (a *app) streamsCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "streams",
		Short:   "List streams",
		Example: "  rheo streams",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				streams, err := c.ListStreams(ctx)
				if err != nil {
					return err
				}
				type streamJSON struct {
					Name       string    `json:"name"`
					Partitions int       `json:"partitions"`
					CreatedAt  time.Time `json:"created_at"`
					// Events counts the retained events; Trimmed those
					// retention removed.
					Events    int64  `json:"events"`
					Trimmed   int64  `json:"trimmed"`
					Retention string `json:"retention"`
				}
				out := make([]streamJSON, 0, len(streams))
				for _, s := range streams {
					st, err := c.Stream(ctx, s.Name)
					if errors.Is(err, rheo.ErrStreamNotFound) {
						continue // deleted meanwhile
					}
					if err != nil {
						return err
					}
					j := streamJSON{Name: s.Name, Partitions: s.Partitions, CreatedAt: s.CreatedAt, Retention: st.Retention.String()}
					for p, hw := range st.HighWatermarks {
						j.Events += hw - st.TrimmedThrough[p]
						j.Trimmed += st.TrimmedThrough[p]
					}
					out = append(out, j)
				}
				if a.jsonOut {
					return writeJSON(a.stdout, out)
				}
				t := newTable(a.stdout, "STREAM", "PARTITIONS", "EVENTS", "TRIMMED", "RETENTION", "CREATED")
				for _, s := range out {
					t.row(s.Name, s.Partitions, s.Events, s.Trimmed, s.Retention, fmtTime(s.CreatedAt))
				}
				return t.flush()
			})
		}),
	}
}

func (a *app) groupsCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "groups STREAM",
		Short:   "List a stream's consumer groups with their lag and health",
		Example: "  rheo groups orders",
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				names, err := c.ListGroups(ctx, args[0])
				if err != nil {
					return err
				}
				infos := make([]rheo.GroupInfo, len(names))
				for i, g := range names {
					if infos[i], err = c.GroupInfo(ctx, args[0], g); err != nil {
						return err
					}
				}
				if a.jsonOut {
					out := make([]groupInfoJSON, len(infos))
					for i, info := range infos {
						out[i] = toGroupInfoJSON(info)
					}
					return writeJSON(a.stdout, out)
				}
				t := newTable(a.stdout, "GROUP", "LAG", "INFLIGHT", "AVAILABLE", "DEAD", "OLDEST PENDING")
				for _, info := range infos {
					t.row(info.Group, info.Lag.Total, info.Inflight, info.Available, info.DeadLetters, fmtTime(info.OldestPending))
				}
				return t.flush()
			})
		}),
	}
}

func (a *app) createStreamCommand() *cobra.Command {
	var (
		partitions  int
		rf          retentionFlags
		ifNotExists bool
	)
	cmd := &cobra.Command{
		Use:   "create-stream STREAM",
		Short: "Create a stream",
		Long: `Create a stream with --partitions partitions and, optionally, a retention
policy (--max-age, --max-events, --interest; see rheo trim). With
--if-not-exists an existing stream with the same settings is success, and one
with different settings an error.`,
		Example: "  rheo create-stream orders --partitions 4\n  rheo create-stream audit --max-age 720h --if-not-exists",
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if partitions < 1 || partitions > rheo.MaxPartitions {
				return usagef("--partitions %d: want 1 to %d", partitions, rheo.MaxPartitions)
			}
			ret, err := rf.build(cmd)
			if err != nil {
				return err
			}
			// The library's own checks of the name and settings, on a store
			// of nothing, before a store is opened (or a file created).
			if err := checkCreateStream(cmd.Context(), args[0], rheo.StreamConfig{Partitions: partitions, Retention: ret}); err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				err := c.CreateStream(ctx, args[0], rheo.StreamConfig{Partitions: partitions, Retention: ret})
				if errors.Is(err, rheo.ErrAlreadyExists) && ifNotExists {
					st, serr := c.Stream(ctx, args[0])
					if serr != nil {
						return serr
					}
					if st.Partitions != partitions || st.Retention != ret {
						return fmt.Errorf("stream %q exists with %d partitions and retention %s, not %d and %s", args[0], st.Partitions, st.Retention, partitions, ret)
					}
					return a.writeResult(map[string]any{"stream": args[0], "partitions": partitions, "created": false},
						"stream %s already exists (%s)", args[0], plural(partitions, "partition"))
				}
				if err != nil {
					return err
				}
				return a.writeResult(map[string]any{"stream": args[0], "partitions": partitions, "created": true},
					"created stream %s (%s)", args[0], plural(partitions, "partition"))
			})
		}),
	}
	cmd.Flags().IntVar(&partitions, "partitions", 1, "number of partitions (1-1024)")
	cmd.Flags().BoolVar(&ifNotExists, "if-not-exists", false, "succeed if the stream exists with the same settings")
	rf.register(cmd)
	return cmd
}

func (a *app) createGroupCommand() *cobra.Command {
	var (
		maxAttempts int
		start       string
		partitions  []int
		ifNotExists bool
	)
	cmd := &cobra.Command{
		Use:   "create-group STREAM GROUP",
		Short: "Create a consumer group on a stream",
		Long: `Create a consumer group. --start says where it begins in the --partition
scope (default all partitions): beginning (default), latest, a sequence number
(the group's frontier starts there), or an RFC 3339 time. With --if-not-exists
an existing group with the same --max-attempts (default 5) is success, and one
with a different limit an error; the start position is not compared, since the
group's progress has moved on from it.`,
		Example: "  rheo create-group orders fulfillment\n  rheo create-group orders audit --start latest --max-attempts 3",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			pos, err := parsePosition(start)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("max-attempts") && maxAttempts < 1 {
				return usagef("--max-attempts %d: want 1 or more (leave the flag out for the default, 5)", maxAttempts)
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				cfg := rheo.GroupConfig{MaxAttempts: maxAttempts, Start: pos, Partitions: partitions}
				err := c.CreateGroup(ctx, args[0], args[1], cfg)
				if errors.Is(err, rheo.ErrAlreadyExists) && ifNotExists {
					// Only MaxAttempts is compared: the start position has
					// been consumed by the group's progress.
					info, ierr := c.GroupInfo(ctx, args[0], args[1])
					if ierr != nil {
						return ierr
					}
					want := cmp.Or(maxAttempts, rheo.DefaultMaxAttempts)
					if info.MaxAttempts != want {
						return fmt.Errorf("group %q on stream %q exists with max attempts %d, not %d", args[1], args[0], info.MaxAttempts, want)
					}
					return a.writeResult(map[string]any{"stream": args[0], "group": args[1], "created": false},
						"group %s on stream %s already exists", args[1], args[0])
				}
				if err != nil {
					return err
				}
				return a.writeResult(map[string]any{"stream": args[0], "group": args[1], "created": true},
					"created group %s on stream %s", args[1], args[0])
			})
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&maxAttempts, "max-attempts", 0, "claims before a delivery is dead-lettered (default 5)")
	fs.StringVar(&start, "start", "beginning", "beginning, latest, a sequence number, or an RFC 3339 time")
	fs.IntSliceVar(&partitions, "partition", nil, "partitions --start applies to (repeatable; default all)")
	fs.BoolVar(&ifNotExists, "if-not-exists", false, "succeed if the group exists with the same max attempts")
	return cmd
}

type partitionLagJSON struct {
	Partition     int   `json:"partition"`
	Frontier      int64 `json:"frontier"`
	HighWatermark int64 `json:"high_watermark"`
	Lag           int64 `json:"lag"`
}

type lagJSON struct {
	Stream     string             `json:"stream"`
	Group      string             `json:"group"`
	Partitions []partitionLagJSON `json:"partitions"`
	Total      int64              `json:"total"`
}

func toLagJSON(l rheo.Lag) lagJSON {
	out := lagJSON{Stream: l.Stream, Group: l.Group, Total: l.Total, Partitions: []partitionLagJSON{}}
	for _, p := range l.Partitions {
		out.Partitions = append(out.Partitions, partitionLagJSON{p.Partition, p.Frontier, p.HighWatermark, p.Lag})
	}
	return out
}

type groupInfoJSON struct {
	Stream        string     `json:"stream"`
	Group         string     `json:"group"`
	Lag           lagJSON    `json:"lag"`
	Inflight      int64      `json:"inflight"`
	Available     int64      `json:"available"`
	DeadLetters   int64      `json:"dead_letters"`
	OldestPending *time.Time `json:"oldest_pending"`
	// Skipped and HoldsRetention: see rheo.GroupInfo.
	Skipped        int64 `json:"skipped"`
	HoldsRetention bool  `json:"holds_retention"`
}

func toGroupInfoJSON(i rheo.GroupInfo) groupInfoJSON {
	out := groupInfoJSON{Stream: i.Stream, Group: i.Group, Lag: toLagJSON(i.Lag),
		Inflight: i.Inflight, Available: i.Available, DeadLetters: i.DeadLetters,
		Skipped: i.Skipped, HoldsRetention: i.HoldsRetention}
	if !i.OldestPending.IsZero() {
		t := i.OldestPending
		out.OldestPending = &t
	}
	return out
}

func (a *app) lagCommand() *cobra.Command {
	var partitions []int
	cmd := &cobra.Command{
		Use:   "lag STREAM GROUP",
		Short: "Show a group's frontier, high watermark and lag per partition",
		Long: `Show a group's honest progress per partition: the committed frontier (every
sequence up to it is acked or dead-lettered), the high watermark, and lag =
high watermark - frontier. A leased but unsettled event keeps counting.`,
		Example: "  rheo lag orders fulfillment\n  rheo lag orders fulfillment --partition 0 --json",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				lag, err := c.Lag(ctx, args[0], args[1], partitions...)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return writeJSON(a.stdout, toLagJSON(lag))
				}
				t := newTable(a.stdout, "PARTITION", "FRONTIER", "HIGH WATERMARK", "LAG")
				for _, p := range lag.Partitions {
					t.row(p.Partition, p.Frontier, p.HighWatermark, p.Lag)
				}
				t.row("total", "", "", lag.Total)
				return t.flush()
			})
		}),
	}
	cmd.Flags().IntSliceVar(&partitions, "partition", nil, "only these partitions (repeatable)")
	return cmd
}

func (a *app) infoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "info STREAM GROUP",
		Short: "Summarise a group's health: lag, leases held, available, dead letters",
		Long: `Summarise a group: total lag, inflight leases (including expired ones nobody
reclaimed yet), deliveries available now or later, dead letters, and the
timestamp of the oldest event not yet terminal for the group; skipped counts
events trims removed before the group acked them, and a line says when the
group holds the stream's retention back.`,
		Example: "  rheo info orders fulfillment",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				info, err := c.GroupInfo(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return writeJSON(a.stdout, toGroupInfoJSON(info))
				}
				t := newTable(a.stdout)
				t.row("stream", info.Stream)
				t.row("group", info.Group)
				t.row("lag", info.Lag.Total)
				t.row("inflight", info.Inflight)
				t.row("available", info.Available)
				t.row("dead letters", info.DeadLetters)
				t.row("oldest pending", fmtTime(info.OldestPending))
				t.row("skipped", info.Skipped)
				if info.HoldsRetention {
					t.row("retention", "held back by this group (its frontier is below the stream's retention target)")
				}
				return t.flush()
			})
		}),
	}
}

func (a *app) deadLettersCommand() *cobra.Command {
	var (
		limit int
		after string
	)
	cmd := &cobra.Command{
		Use:     "dead-letters STREAM GROUP",
		Short:   "List a group's dead letters",
		Long:    "List the events a group gave up on, by (partition, sequence), with attempts and reason.",
		Example: "  rheo dead-letters orders fulfillment\n  rheo dead-letters orders fulfillment --after EVENT_ID --limit 50",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				dls, err := c.DeadLetters(ctx, args[0], args[1], rheo.DeadLetterOptions{Limit: limit, After: after})
				if err != nil {
					return err
				}
				if a.jsonOut {
					type deadLetterJSON struct {
						EventID        string    `json:"event_id"`
						Partition      int       `json:"partition"`
						Sequence       int64     `json:"sequence"`
						Attempts       int       `json:"attempts"`
						Reason         string    `json:"reason"`
						DeadLetteredAt time.Time `json:"dead_lettered_at"`
						Event          eventJSON `json:"event"`
					}
					out := make([]deadLetterJSON, len(dls))
					for i, d := range dls {
						out[i] = deadLetterJSON{d.EventID, d.Partition, d.Sequence, d.Attempts, d.Reason, d.DeadLetteredAt, toEventJSON(d.Event)}
					}
					return writeJSON(a.stdout, out)
				}
				t := newTable(a.stdout, "PARTITION", "SEQ", "EVENT ID", "ATTEMPTS", "DEAD-LETTERED", "REASON")
				for _, d := range dls {
					t.row(d.Partition, d.Sequence, d.EventID, d.Attempts, fmtTime(d.DeadLetteredAt), d.Reason)
				}
				return t.flush()
			})
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "most dead letters to list (max 10000)")
	cmd.Flags().StringVar(&after, "after", "", "continue after this dead letter's event ID")
	return cmd
}

func (a *app) redriveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "redrive STREAM GROUP [EVENT_ID...]",
		Short: "Make dead letters available again (all, or the named ones)",
		Long: `Make the group's dead letters available again with attempts reset: the named
ones, or all of them when none are named. Named IDs that are not dead letters
of the group are an error, and then nothing is redriven. It prints how many
were reopened and the group's lag afterwards.`,
		Example: "  rheo redrive orders fulfillment\n  rheo redrive orders fulfillment 0193a1b2-…",
		Args:    cobra.MinimumNArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				stream, group := args[0], args[1]
				var unknown []string
				for _, id := range args[2:] {
					// Paging after an ID that is not one of the group's
					// dead letters fails with ErrCursorNotFound.
					_, err := c.DeadLetters(ctx, stream, group, rheo.DeadLetterOptions{After: id, Limit: 1})
					if errors.Is(err, rheo.ErrCursorNotFound) {
						unknown = append(unknown, id)
					} else if err != nil {
						return err
					}
				}
				if len(unknown) > 0 {
					return fmt.Errorf("not dead letters of group %q: %s; nothing was redriven", group, strings.Join(unknown, ", "))
				}
				n, err := c.Redrive(ctx, stream, group, args[2:]...)
				if err != nil {
					return err
				}
				lag, err := c.Lag(ctx, stream, group)
				if err != nil {
					return err
				}
				return a.writeResult(map[string]any{"redriven": n, "lag": toLagJSON(lag)},
					"redrove %d dead letters of group %s; lag now %d", n, group, lag.Total)
			})
		}),
	}
}

func (a *app) replayCommand() *cobra.Command {
	var (
		fromSeq    int64
		fromTime   string
		events     []string
		partitions []int
		q          = queryFlags{}
	)
	cmd := &cobra.Command{
		Use:   "replay STREAM GROUP",
		Short: "Reopen a group's deliveries so their events are delivered again",
		Long: `Reopen a group's deliveries (acked, dead-lettered or leased: current holders'
settles become stale) with attempts starting again from 0. Choose exactly one
range: --from-seq N (every sequence above N), --from-time T (from the first
event at or after T), --event ID (repeatable), or query filters (--type, --key,
--meta, --field, --from, --to, --after-seq, --until-seq: every matching event).
--partition restricts the scope. Events and other groups are never touched.`,
		Example: "  rheo replay orders fulfillment --from-seq 0\n" +
			"  rheo replay orders fulfillment --from-time 2026-01-02T00:00:00Z --partition 1\n" +
			"  rheo replay orders fulfillment --type order_placed --field country=NL",
		Args: cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			var from rheo.Replay
			modes := 0
			if fs.Changed("from-seq") {
				if fromSeq < 0 {
					return usagef("--from-seq %d: want 0 or more (0 reopens every sequence)", fromSeq)
				}
				modes++
				from = rheo.FromSequence(fromSeq)
			}
			if fromTime != "" {
				modes++
				t, err := parseTime("from-time", fromTime)
				if err != nil {
					return err
				}
				from = rheo.FromTime(t)
			}
			if len(events) > 0 {
				modes++
				from = rheo.Events(events...)
			}
			if q.set() {
				modes++
				query, err := q.build(args[0])
				if err != nil {
					return err
				}
				from = rheo.Matching(query)
			}
			if modes != 1 {
				return usagef("replay needs exactly one range: --from-seq, --from-time, --event, or query filters")
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				n, err := c.Replay(ctx, args[0], args[1], from, partitions...)
				if err != nil {
					return err
				}
				return a.writeLagAfter(ctx, c, args[0], args[1], "replayed", n)
			})
		}),
	}
	fs := cmd.Flags()
	fs.Int64Var(&fromSeq, "from-seq", 0, "reopen every sequence above this one")
	fs.StringVar(&fromTime, "from-time", "", "reopen from the first event at or after this RFC 3339 time")
	fs.StringArrayVar(&events, "event", nil, "reopen this event ID (repeatable)")
	fs.IntSliceVar(&partitions, "partition", nil, "restrict the replay to these partitions (repeatable)")
	q.register(fs)
	return cmd
}

// writeLagAfter prints what a change to a group did (done: "replayed",
// "reset"), how many deliveries it reopened, and the group's lag read right
// after it, the figure an operator checks next.
func (a *app) writeLagAfter(ctx context.Context, c *rheo.Client, stream, group, done string, reopened int) error {
	lag, err := c.Lag(ctx, stream, group)
	if err != nil {
		return err
	}
	return a.writeResult(map[string]any{done: true, "reopened": reopened, "lag": toLagJSON(lag)},
		"%s group %s on stream %s: reopened %s; lag now %d", done, group, stream, deliveries(reopened), lag.Total)
}

// deliveries is "1 delivery" or "n deliveries".
func deliveries(n int) string {
	if n == 1 {
		return "1 delivery"
	}
	return fmt.Sprintf("%d deliveries", n)
}

func (a *app) resetCommand() *cobra.Command {
	var (
		confirm    bool
		start      string
		partitions []int
	)
	cmd := &cobra.Command{
		Use:   "reset STREAM GROUP --confirm",
		Short: "Forget a group's progress and restart it (needs --confirm)",
		Long: `Forget everything of the group in the --partition scope (deliveries, leases,
dead letters) and restart it at --start: beginning (default), latest, a
sequence number or an RFC 3339 time. It refuses to run without --confirm.`,
		Example: "  rheo reset orders fulfillment --start latest --confirm",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if !confirm {
				return usagef("reset forgets the progress, leases and dead letters of group %q on stream %q; nothing was changed — rerun with --confirm", args[1], args[0])
			}
			pos, err := parsePosition(start)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				opts := rheo.ResetOptions{Confirm: true, Start: pos, Partitions: partitions}
				n, err := c.ResetGroup(ctx, args[0], args[1], opts)
				if err != nil {
					return err
				}
				return a.writeLagAfter(ctx, c, args[0], args[1], "reset", n)
			})
		}),
	}
	fs := cmd.Flags()
	fs.BoolVar(&confirm, "confirm", false, "really forget the group's progress")
	fs.StringVar(&start, "start", "beginning", "beginning, latest, a sequence number, or an RFC 3339 time")
	fs.IntSliceVar(&partitions, "partition", nil, "reset only these partitions (repeatable)")
	return cmd
}

// checkCreateStream runs CreateStream on an empty memory store: the same
// checks of the name and settings every store makes, before the command
// opens (and, for a sqlite: path, creates) the real one.
func checkCreateStream(ctx context.Context, name string, cfg rheo.StreamConfig) error {
	c := rheo.New(memory.New())
	defer c.Close()
	return c.CreateStream(ctx, name, cfg)
}
