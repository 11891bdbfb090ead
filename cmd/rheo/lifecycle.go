package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
)

func (a *app) deleteGroupCommand() *cobra.Command {
	var confirm bool
	cmd := &cobra.Command{
		Use:   "delete-group STREAM GROUP --confirm",
		Short: "Delete a consumer group with its progress and dead letters (needs --confirm)",
		Long: `Delete a consumer group: its cursor, deliveries, leases and dead letters. Its
workers' outstanding leases can no longer settle. Events and other groups are
untouched. It refuses to run without --confirm.`,
		Example: "  rheo delete-group orders old-audit --confirm",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if !confirm {
				return usagef("delete-group drops the progress and dead letters of group %q on stream %q; nothing was changed — rerun with --confirm", args[1], args[0])
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				if err := c.DeleteGroup(ctx, args[0], args[1], rheo.DeleteOptions{Confirm: true}); err != nil {
					return err
				}
				return a.writeResult(map[string]any{"stream": args[0], "group": args[1], "deleted": true},
					"deleted group %s of stream %s", args[1], args[0])
			})
		}),
	}
	cmd.Flags().BoolVar(&confirm, "confirm", false, "really delete the group")
	return cmd
}

func (a *app) deleteStreamCommand() *cobra.Command {
	var confirm bool
	cmd := &cobra.Command{
		Use:   "delete-stream STREAM --confirm",
		Short: "Delete a stream with its events and every group (needs --confirm)",
		Long: `Delete a stream: its events, partitions, retention policy and every consumer
group with all their state. It refuses to run without --confirm.`,
		Example: "  rheo delete-stream scratch --confirm",
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if !confirm {
				return usagef("delete-stream drops every event and group of stream %q; nothing was changed — rerun with --confirm", args[0])
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				if err := c.DeleteStream(ctx, args[0], rheo.DeleteOptions{Confirm: true}); err != nil {
					return err
				}
				return a.writeResult(map[string]any{"stream": args[0], "deleted": true}, "deleted stream %s", args[0])
			})
		}),
	}
	cmd.Flags().BoolVar(&confirm, "confirm", false, "really delete the stream")
	return cmd
}

// retentionFlags are the rules of rheo.Retention, shared by create-stream,
// set-retention and trim.
type retentionFlags struct {
	maxAge    time.Duration
	maxEvents int64
	interest  bool
}

func (r *retentionFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.DurationVar(&r.maxAge, "max-age", 0, "remove events older than this (e.g. 72h)")
	fs.Int64Var(&r.maxEvents, "max-events", 0, "keep at most this many events per partition")
	fs.BoolVar(&r.interest, "interest", false, "remove events every group has finished")
}

// build validates the flags: a value given explicitly must be positive
// (zero would silently mean "no rule").
func (r *retentionFlags) build(cmd *cobra.Command) (rheo.Retention, error) {
	fs := cmd.Flags()
	if fs.Changed("max-age") && r.maxAge < time.Millisecond {
		return rheo.Retention{}, usagef("--max-age %s: want a duration of 1ms or more, such as 72h", r.maxAge)
	}
	if fs.Changed("max-events") && r.maxEvents <= 0 {
		return rheo.Retention{}, usagef("--max-events %d: want a positive count", r.maxEvents)
	}
	return rheo.Retention{MaxAge: r.maxAge, MaxEvents: r.maxEvents, Interest: r.interest}, nil
}

type trimJSON struct {
	Stream      string              `json:"stream"`
	Removed     int64               `json:"removed"`
	Skipped     int64               `json:"skipped"`
	DeadLetters int64               `json:"dead_letters"`
	Partitions  []partitionTrimJSON `json:"partitions"`
}

type partitionTrimJSON struct {
	Partition      int      `json:"partition"`
	Target         int64    `json:"target"`
	TrimmedThrough int64    `json:"trimmed_through"`
	Removed        int64    `json:"removed"`
	HeldBy         []string `json:"held_by"`
}

func (a *app) trimCommand() *cobra.Command {
	var (
		rf         retentionFlags
		force      bool
		confirm    bool
		partitions []int
	)
	cmd := &cobra.Command{
		Use:   "trim STREAM [--max-age D] [--max-events N] [--interest] [--force --confirm]",
		Short: "Remove old events now, by the given rules or the stream's retention policy",
		Long: `Remove old events of a stream now: by --max-age, --max-events and --interest
when given, else by the stream's retention policy. Without --force it never
removes an event a group has not finished: slow groups hold the trim back and
are named in the output. --force (with --confirm) removes anyway; the groups
then skip the removed range and count it as skipped (rheo info).`,
		Example: "  rheo trim orders --max-events 100000\n  rheo trim orders --max-age 720h --force --confirm",
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			rules, err := rf.build(cmd)
			if err != nil {
				return err
			}
			if force && !confirm {
				return usagef("trim --force removes events groups have not finished; nothing was changed — rerun with --force --confirm")
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				if rules.IsZero() {
					st, err := c.Stream(ctx, args[0])
					if err != nil {
						return err
					}
					if st.Retention.IsZero() {
						return fmt.Errorf("stream %q has no retention policy and the trim names no rule: give --max-age, --max-events or --interest, or store a policy with rheo set-retention", args[0])
					}
				}
				rep, err := c.Trim(ctx, args[0], rheo.TrimOptions{Retention: rules, Force: force, Confirm: confirm, Partitions: partitions})
				if err != nil {
					return err
				}
				out := trimJSON{Stream: rep.Stream, Removed: rep.Removed, Skipped: rep.Skipped, DeadLetters: rep.DeadLetters, Partitions: []partitionTrimJSON{}}
				held := map[string]bool{}
				for _, p := range rep.Partitions {
					hb := p.HeldBy
					if hb == nil {
						hb = []string{}
					}
					for _, g := range hb {
						held[g] = true
					}
					out.Partitions = append(out.Partitions, partitionTrimJSON{p.Partition, p.Target, p.TrimmedThrough, p.Removed, hb})
				}
				if a.jsonOut {
					return writeJSON(a.stdout, out)
				}
				fmt.Fprintf(a.stdout, "removed %s of stream %s", plural(rep.Removed, "event"), rep.Stream)
				if rep.Skipped > 0 {
					fmt.Fprintf(a.stdout, " (%d not acked by some group, %d dead letters)", rep.Skipped, rep.DeadLetters)
				}
				fmt.Fprintln(a.stdout)
				for _, g := range sortedSet(held) {
					fmt.Fprintf(a.stdout, "held back by group %s (its frontier is below the rules' target)\n", g)
				}
				return nil
			})
		}),
	}
	rf.register(cmd)
	fs := cmd.Flags()
	fs.BoolVar(&force, "force", false, "remove events even if groups have not finished them (needs --confirm)")
	fs.BoolVar(&confirm, "confirm", false, "confirm a forced trim")
	fs.IntSliceVar(&partitions, "partition", nil, "trim only these partitions (repeatable)")
	return cmd
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

type deliveryStateJSON struct {
	Group    string `json:"group"`
	State    string `json:"state"`
	Frontier int64  `json:"frontier"`
}

func (a *app) getCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get STREAM EVENT_ID",
		Short: "Show one event and where each group stands with it",
		Long: `Show one event by ID and, for each group of the stream, its delivery state:
done (at or below the group's frontier: acked), dead-letter, or pending (above
the frontier: not yet offered, in flight, or acked out of order).`,
		Example: "  rheo get orders 0193a1b2-…",
		Args:    cobra.ExactArgs(2),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				stream, id := args[0], args[1]
				found, err := c.Backend().Events(ctx, stream, []string{id})
				if err != nil {
					return err
				}
				if len(found) == 0 {
					return fmt.Errorf("event %q is not in stream %q (never appended, or trimmed)", id, stream)
				}
				ev := found[0]
				groups, err := c.ListGroups(ctx, stream)
				if err != nil {
					return err
				}
				states := []deliveryStateJSON{}
				for _, g := range groups {
					lag, err := c.Lag(ctx, stream, g, ev.Partition)
					if err != nil {
						return err
					}
					f := lag.Partitions[0].Frontier
					state := "pending"
					if ev.Sequence <= f {
						state = "done"
					}
					// Paging after an ID that is not one of the group's dead
					// letters fails with ErrCursorNotFound: a cheap lookup.
					_, err = c.DeadLetters(ctx, stream, g, rheo.DeadLetterOptions{After: id, Limit: 1})
					switch {
					case err == nil:
						state = "dead-letter"
					case !errors.Is(err, rheo.ErrCursorNotFound):
						return err
					}
					states = append(states, deliveryStateJSON{g, state, f})
				}
				if a.jsonOut {
					return writeJSON(a.stdout, map[string]any{"event": toEventJSON(ev), "groups": states})
				}
				if err := a.writeEvents(a.stdout, []rheo.Event{ev}); err != nil {
					return err
				}
				fmt.Fprintln(a.stdout)
				t := newTable(a.stdout, "GROUP", "STATE", "FRONTIER")
				for _, s := range states {
					t.row(s.Group, s.State, s.Frontier)
				}
				return t.flush()
			})
		}),
	}
}

// version is the module version the binary was built from.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print rheo's version",
		Args:  cobra.NoArgs,
		RunE: action(func(*cobra.Command, []string) error {
			return a.writeResult(map[string]any{"version": version()}, "rheo %s", version())
		}),
	}
}

func (a *app) completionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print a completion script for your shell, e.g.
  source <(rheo completion bash)
  rheo completion zsh > "${fpath[1]}/_rheo"
  rheo completion fish > ~/.config/fish/completions/rheo.fish`,
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"bash", "zsh", "fish"},
		RunE: action(func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(a.stdout, true)
			case "zsh":
				return root.GenZshCompletion(a.stdout)
			default:
				return root.GenFishCompletion(a.stdout, true)
			}
		}),
	}
}

// requireExistingStore refuses to open a sqlite: file that does not exist
// yet: commands that only read, or change what must already exist, never
// leave a new empty database behind (a mistyped path is an error).
func (a *app) requireExistingStore() error {
	dsn := a.storeDSN()
	path, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok {
		return nil
	}
	path = strings.TrimPrefix(path, "file:")
	path, _, _ = strings.Cut(path, "?")
	if path == "" || path == ":memory:" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store %s does not exist (create it with rheo create-stream or rheo migrate, or check --dsn/RHEO_DSN)", redact(dsn))
	}
	return nil
}

// requireLastingStore refuses memory: to a command that works on what a
// store holds: memory: is a new, empty store in every run of rheo, gone
// when it exits, so a stream created there (say) would be gone before the
// next command. demo, bench and migrate do not come here (the first two
// do everything in one run). append checks before it reads stdin.
func (a *app) requireLastingStore(cmd string) error {
	if a.storeDSN() == "memory:" {
		return usagef("memory: is a new, empty store in every run of rheo, gone when it exits: 'rheo %s' needs a store that outlives it; "+
			"use sqlite:PATH (the default is sqlite:rheo.db) or a shared store (only demo, bench and migrate take memory:)", cmd)
	}
	return nil
}

// storeCreators may create a sqlite: file that does not exist yet: every
// other command works on what a store already holds (a stream, a group),
// so a path that does not exist is a mistake to report, not a new empty
// database to leave behind.
var storeCreators = map[string]bool{
	"create-stream": true, "migrate": true, "demo": true, "demo-worker": true, "bench": true,
}

func (a *app) setRetentionCommand() *cobra.Command {
	var rf retentionFlags
	var none bool
	cmd := &cobra.Command{
		Use:   "set-retention STREAM [--max-age D] [--max-events N] [--interest] [--none]",
		Short: "Set a stream's retention policy",
		Long: `Set the retention policy of a stream (it replaces the previous one; --none
removes it). The policy removes nothing by itself: 'rheo trim STREAM' applies
it, and so does any client opened WithRetention.`,
		Example: "  rheo set-retention orders --max-age 720h --max-events 1000000",
		Args:    cobra.ExactArgs(1),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			r, err := rf.build(cmd)
			if err != nil {
				return err
			}
			if r.IsZero() != none {
				return usagef("set-retention needs --max-age, --max-events or --interest, or --none to remove the policy (not both)")
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				if err := c.SetRetention(ctx, args[0], r); err != nil {
					return err
				}
				return a.writeResult(map[string]any{"stream": args[0], "retention": r.String()},
					"retention of stream %s: %s", args[0], r)
			})
		}),
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&none, "none", false, "remove the retention policy")
	return cmd
}
