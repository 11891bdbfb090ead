// Command rheo operates a rheo store: it creates streams and groups, appends,
// queries and tails events, inspects lag and dead letters, replays, resets,
// benchmarks a backend, and runs the crash demo (`rheo demo`).
//
// The store comes from --dsn or RHEO_DSN (memory:, sqlite:PATH, postgres://…,
// redis://…, mongodb://…), default sqlite:rheo.db. Tables by default, --json for scripts.
// Errors print one line on stderr and exit 1; usage errors exit 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
	rdsn "github.com/rheo-go/rheo/internal/dsn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultDSN is the store used when neither --dsn nor RHEO_DSN is given.
const defaultDSN = "sqlite:rheo.db"

// run executes the command line args and returns the process exit code. It
// is main without the process: tests call it in-process.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newApp(stdin, stdout, stderr).run(ctx, args)
}

// app holds what every subcommand shares: I/O, the global flags and the
// seams tests replace (how a client is opened, which binary re-executes).
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// open opens the client for a DSN; tests swap it to share one store
	// between invocations.
	open func(ctx context.Context, dsn string, opts ...rheo.Option) (*rheo.Client, error)
	// executable is the binary the demo re-executes for its worker processes.
	executable func() (string, error)

	dsn     string
	jsonOut bool
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{
		stdin: stdin, stdout: stdout, stderr: stderr,
		getenv:     os.Getenv,
		open:       openStore,
		executable: os.Executable,
	}
}

// usageError is a malformed command line: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// runError is an error raised while running a well-formed command: exit 1.
type runError struct{ err error }

func (e runError) Error() string { return e.err.Error() }
func (e runError) Unwrap() error { return e.err }

// exitCodeError lets a command choose its exit code after it has already
// reported what went wrong.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func (a *app) run(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var code exitCodeError
	if errors.As(err, &code) {
		return code.code
	}
	var re runError
	var ue usageError
	if errors.As(err, &re) && !errors.As(err, &ue) {
		fmt.Fprintf(a.stderr, "rheo: %s\n", oneLine(err.Error()))
		return exitError
	}
	// Everything cobra rejects before a command runs (unknown command or
	// flag, wrong argument count) is a usage error, like ours.
	fmt.Fprintf(a.stderr, "rheo: %s\n", oneLine(err.Error()))
	fmt.Fprintf(a.stderr, "Run 'rheo help' or 'rheo COMMAND --help' for usage.\n")
	return exitUsage
}

// oneLine keeps an error message on a single line of stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// action adapts a subcommand body so that its errors count as run errors
// (exit 1) unless it says otherwise with a usageError.
func action(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var ue usageError
		var ce exitCodeError
		if errors.As(err, &ue) || errors.As(err, &ce) {
			return err
		}
		return runError{withHint(cmd.Name(), err)}
	}
}

// withHint adds to a missing or existing stream or group what to run next.
func withHint(command string, err error) error {
	var h string
	switch {
	case errors.Is(err, rheo.ErrStreamNotFound):
		h = "rheo streams lists the streams, rheo create-stream creates one; or check --dsn/RHEO_DSN"
	case errors.Is(err, rheo.ErrGroupNotFound):
		h = "rheo groups STREAM lists its groups, rheo create-group creates one"
	case errors.Is(err, rheo.ErrAlreadyExists) && (command == "create-stream" || command == "create-group"):
		h = "with --if-not-exists one with the same settings is success"
	default:
		return err
	}
	return fmt.Errorf("%w (%s)", err, h)
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rheo",
		Short: "Operate a rheo event log and its consumer groups",
		Long: `rheo operates a rheo store: an append-only, partitioned, queryable event log
with consumer groups that lease events to competing workers.

The store comes from --dsn or the RHEO_DSN environment variable:
  memory:             in this process only, gone when the command exits
                      (for demo and bench)
  sqlite:PATH         an embedded SQLite file (the default: sqlite:rheo.db)
  postgres://…        a shared PostgreSQL database
  redis://…           a shared Redis server
  mongodb://…/DB      a shared MongoDB database

Start with 'rheo demo': it kills a real worker process mid-lease and shows
the lease move to another worker.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.dsn, "dsn", "", "store DSN (default $RHEO_DSN, else "+defaultDSN+")")
	pf.BoolVar(&a.jsonOut, "json", false, "print JSON instead of tables")

	root.AddCommand(
		a.demoCommand(),
		a.demoWorkerCommand(),
		a.migrateCommand(),
		a.streamsCommand(),
		a.groupsCommand(),
		a.createStreamCommand(),
		a.createGroupCommand(),
		a.appendCommand(),
		a.queryCommand(),
		a.tailCommand(),
		a.lagCommand(),
		a.infoCommand(),
		a.deadLettersCommand(),
		a.redriveCommand(),
		a.replayCommand(),
		a.resetCommand(),
		a.benchCommand(),
		a.metricsCommand(),
		a.dashboardCommand(),
		a.deleteGroupCommand(),
		a.deleteStreamCommand(),
		a.setRetentionCommand(),
		a.trimCommand(),
		a.getCommand(),
		a.versionCommand(),
		a.completionCommand(),
	)
	root.Version = version()
	root.SetVersionTemplate("rheo {{.Version}}\n")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if f := cmd.Flags().Lookup("dsn"); f != nil && f.Changed && a.dsn == "" {
			return usagef("--dsn is empty: give a store DSN (memory:, sqlite:PATH, postgres://…, redis://…, mongodb://…) or leave the flag out")
		}
		return nil
	}
	return root
}

// storeDSN resolves the DSN: --dsn, then RHEO_DSN, then the default.
func (a *app) storeDSN() string {
	if a.dsn != "" {
		return a.dsn
	}
	if d := a.getenv("RHEO_DSN"); d != "" {
		return d
	}
	return defaultDSN
}

// dsnGiven reports whether the user chose a store (flag or environment).
func (a *app) dsnGiven() bool {
	return a.dsn != "" || a.getenv("RHEO_DSN") != ""
}

// client opens the store. Embedded stores (memory:, sqlite:) get their schema
// on the spot, so a fresh SQLite file works on the first command; shared
// stores are migrated only by 'rheo migrate', an operator's decision.
func (a *app) client(ctx context.Context, opts ...rheo.Option) (*rheo.Client, error) {
	return a.openDSN(ctx, a.storeDSN(), opts...)
}

// withClient runs f with a client of the store (see client) and the
// command's context, closing the client when f returns: every command that
// talks to the store once goes through here. Only storeCreators may open a
// sqlite: file that does not exist yet.
func (a *app) withClient(cmd *cobra.Command, f func(ctx context.Context, c *rheo.Client) error) error {
	ctx := cmd.Context()
	if err := a.requireLastingStore(cmd.Name()); err != nil {
		return err
	}
	if !storeCreators[cmd.Name()] {
		if err := a.requireExistingStore(); err != nil {
			return err
		}
	}
	c, err := a.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(ctx, c)
}

func (a *app) openDSN(ctx context.Context, dsn string, opts ...rheo.Option) (*rheo.Client, error) {
	// Only warnings reach stderr: the command's output is its own.
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts = append([]rheo.Option{rheo.WithLogger(logger)}, opts...)
	c, err := a.open(ctx, dsn, opts...)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redact(dsn), err)
	}
	if embedded(dsn) {
		if err := c.Migrate(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("migrate %s: %w", redact(dsn), err)
		}
	} else if err := requireMigrated(ctx, c); err != nil {
		c.Close()
		return nil, fmt.Errorf("open %s: %w", redact(dsn), err)
	}
	return c, nil
}

// embedded reports whether the DSN names a store this command may own.
func embedded(dsn string) bool {
	return strings.HasPrefix(dsn, "memory:") || strings.HasPrefix(dsn, "sqlite:")
}

// redact hides a password in a URL-style DSN before it is printed.
func redact(dsn string) string { return rdsn.Redact(dsn) }
