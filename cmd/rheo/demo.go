package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// Demo defaults: a short lease so that the expiry is watched in real time.
const (
	demoLease     = 2 * time.Second
	demoGroup     = "fulfillment"
	demoStream    = "orders"
	workerTimeout = 20 * time.Second
)

// Faults the demo can be told to inject, to prove that it notices a broken
// invariant. They are hidden: they exist for the demo's own tests.
const (
	faultNone = ""
	// faultSkipAck makes worker B report its acks without sending them, the
	// way a lost acknowledgement looks to the worker.
	faultSkipAck = "skip-ack"
	// faultEarlyB starts worker B before lease L1 has expired.
	faultEarlyB = "early-b"
)

// demoOrder is one event the demo appends.
type demoOrder struct {
	id, customer, country string
	total                 float64
}

var demoOrders = []demoOrder{
	{"order-1001", "cust-1", "FR", 42.50},
	{"order-1002", "cust-2", "NL", 17.00},
	{"order-1003", "cust-1", "FR", 99.90},
	{"order-1004", "cust-3", "NL", 5.25},
	{"order-1005", "cust-2", "DE", 64.00},
}

func (a *app) demoCommand() *cobra.Command {
	var (
		lease time.Duration
		keep  bool
		fault string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Kill a worker process mid-lease and watch the lease move (the crash demo)",
		Long: `The crash demo. On a fresh SQLite file in a temporary directory (or --dsn), it:

  appends orders, creates the group fulfillment, starts worker A as a separate
  process, lets A lease an event and SIGKILLs it before it acks; shows lag still
  counting the event; waits (real time) for A's lease to expire; starts worker
  B, another process, which gets the same event at attempt 2 and acks it; lets
  a resurrected A try to ack with its old lease, which is refused with
  stale_lease; shows lag reach 0; reads the event back unchanged and queries
  the log.

Every step prints one timeline line and is checked; the demo exits non-zero
with a message naming the fact that did not hold. With --dsn memory: (a store
inside one process) it runs an in-process version with a frozen clock.`,
		Example: "  rheo demo\n  rheo demo --keep\n  rheo demo --dsn memory:",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if lease <= 0 {
				return usagef("demo: --lease %v must be positive", lease)
			}
			switch fault {
			case faultNone, faultSkipAck, faultEarlyB:
			default:
				return usagef("demo: unknown fault %q", fault)
			}
			d := &demo{a: a, lease: lease, keep: keep, fault: fault, started: time.Now()}
			return d.run(cmd.Context())
		}),
	}
	fs := cmd.Flags()
	fs.DurationVar(&lease, "lease", demoLease, "lease duration of the demo's workers (the demo waits it out)")
	fs.BoolVar(&keep, "keep", false, "keep the demo's store to inspect it afterwards (the temporary SQLite file, or the stream in the store --dsn names)")
	fs.StringVar(&fault, "fault", "", "inject a fault to see the demo catch it: skip-ack, early-b")
	_ = fs.MarkHidden("fault")
	return cmd
}

// demo runs the crash demo's timeline.
type demo struct {
	a       *app
	lease   time.Duration
	keep    bool
	fault   string
	started time.Time

	dsn        string
	inProcess  bool
	frozen     *clock.Frozen
	c          *rheo.Client
	stream     string
	created    bool // the demo created stream (in a store the user named, it deletes it)
	appended   []rheo.Event
	step       int
	workerA    *exec.Cmd
	workerAErr *bytes.Buffer
}

// demoFailure is a fact of the demo that did not hold.
type demoFailure struct {
	step int
	what string
	msg  string
}

func (f *demoFailure) Error() string {
	return fmt.Sprintf("demo failed at t%d (%s): %s", f.step, f.what, f.msg)
}

func (d *demo) fail(what, format string, args ...any) error {
	return &demoFailure{step: d.step, what: what, msg: fmt.Sprintf(format, args...)}
}

// line prints one timeline step: "t3  verb        text".
func (d *demo) line(verb, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if d.a.jsonOut {
		_ = json.NewEncoder(d.a.stdout).Encode(map[string]any{"t": d.step, "step": verb, "text": text})
	} else {
		fmt.Fprintf(d.a.stdout, "%-4s%-12s%s\n", fmt.Sprintf("t%d", d.step), verb, text)
	}
	d.step++
}

// note prints a line outside the timeline (setup, explanations, the verdict).
func (d *demo) note(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if d.a.jsonOut {
		_ = json.NewEncoder(d.a.stdout).Encode(map[string]any{"note": text})
		return
	}
	fmt.Fprintln(d.a.stdout, text)
}

func (d *demo) run(ctx context.Context) (err error) {
	d.stream = demoStream
	var tmp string
	switch {
	case d.a.dsn != "":
		d.dsn = d.a.dsn
	case d.a.getenv("RHEO_DSN") != "":
		// The demo writes a stream and kills workers: never into a store
		// someone named for other work, only into one named for it.
		return fmt.Errorf("rheo demo does not write into the store RHEO_DSN names (%s); pass it as --dsn to use it on purpose, or unset RHEO_DSN for a throwaway store", redact(d.a.getenv("RHEO_DSN")))
	default:
		if tmp, err = os.MkdirTemp("", "rheo-demo-"); err != nil {
			return err
		}
		d.dsn = "sqlite:" + filepath.Join(tmp, "demo.db")
	}
	defer func() {
		if tmp == "" {
			return
		}
		// A failed run keeps its store: it is the evidence.
		if d.keep || err != nil {
			d.noteKept("store")
			return
		}
		os.RemoveAll(tmp)
	}()
	defer d.stopWorkerA()

	d.inProcess = strings.HasPrefix(d.dsn, "memory:")
	if d.inProcess {
		d.note("memory: lives inside one process, but a crash demo needs a store shared between processes")
		d.note("(sqlite:PATH, postgres://, redis://) so that another process can take a dead worker's lease.")
		d.note("Running the in-process version instead: worker A abandons its lease; a frozen clock jumps past expiry.")
		d.frozen = clock.NewFrozen(time.Now())
		d.c, err = d.a.openDSN(ctx, d.dsn, rheo.WithClock(d.frozen), rheo.WithLeaseDuration(d.lease))
	} else {
		d.c, err = d.a.openDSN(ctx, d.dsn)
	}
	if err != nil {
		return err
	}
	defer d.c.Close()
	if tmp == "" && !d.inProcess {
		// A store the user named keeps only what they asked for: the
		// demo's stream goes when the demo succeeds, unless --keep; a
		// failed run keeps it, as the evidence.
		defer func() { d.cleanUp(err) }()
	}
	if d.inProcess {
		d.note("rheo demo on %s, lease %v (in-process, frozen clock)", d.dsn, d.lease)
	} else {
		d.note("rheo demo on %s, lease %v (short on purpose: the demo waits it out)", redact(d.dsn), d.lease)
	}
	if d.fault != faultNone {
		d.note("fault injected: %s", d.fault)
	}

	if err := d.appendOrders(ctx); err != nil {
		return err
	}
	if err := d.c.CreateGroup(ctx, d.stream, demoGroup, rheo.GroupConfig{}); err != nil {
		return d.fail("group", "create group %s: %v", demoGroup, err)
	}
	d.line("group", "created %s on %s; it starts at the beginning", demoGroup, d.stream)

	l1, err := d.workerAFetch(ctx)
	if err != nil {
		return err
	}
	e := d.appended[0]
	if l1.Event.ID != e.ID || l1.Attempt != 1 {
		return d.fail("fetch", "worker A got %s attempt %d, want %s attempt 1", l1.Event.ID, l1.Attempt, e.ID)
	}
	d.line("fetch", "A leased %s (seq %d) under L1=%s, attempt 1, expires in %v",
		e.ID, e.Sequence, short(l1.ID), l1.ExpiresAt.Sub(l1.LeasedAt).Round(time.Millisecond))

	if err := d.killWorkerA(); err != nil {
		return err
	}

	lag, info, err := d.health(ctx)
	if err != nil {
		return err
	}
	if lag.Total != int64(len(d.appended)) || info.Inflight != 1 {
		return d.fail("lag", "after A died, lag is %d with %d leases inflight; want %d and 1: the unacked event must still count",
			lag.Total, info.Inflight, len(d.appended))
	}
	d.line("lag", "%d: %s still counts (L1 is held by a dead worker; 1 lease inflight)", lag.Total, e.ID)

	if err := d.expire(ctx, l1); err != nil {
		return err
	}

	res, err := d.workerB(ctx)
	if err != nil {
		return err
	}
	var l2 rheo.Lease
	found := false
	for _, l := range res.leases {
		if l.Event.ID == e.ID {
			l2, found = l, true
		}
	}
	if !found {
		return d.fail("worker B", "worker B did not get %s (it got %d other events): L1 had not expired, or the event is lost", e.ID, len(res.leases))
	}
	if l2.Attempt != 2 || l2.ID == l1.ID {
		return d.fail("worker B", "worker B got %s at attempt %d under lease %s; want attempt 2 under a new lease", e.ID, l2.Attempt, short(l2.ID))
	}
	if res.acked != len(res.leases) {
		return d.fail("worker B", "worker B acked %d of its %d leases: %s", res.acked, len(res.leases), res.ackErr)
	}
	d.line("worker B", "%s leased %s under L2=%s, attempt 2, and acked it (with %d newer events)",
		res.who, e.ID, short(l2.ID), len(res.leases)-1)

	code, err := d.resurrectA(ctx, l1)
	if err != nil {
		return err
	}
	if code != "stale_lease" {
		return d.fail("stale ack", "the resurrected worker A acked with the old lease L1 and got %q, want stale_lease: a dead worker could still commit", code)
	}
	d.line("stale ack", "resurrected A acks %s with L1=%s -> stale_lease (refused, as it must be)", e.ID, short(l1.ID))

	lag, info, err = d.health(ctx)
	if err != nil {
		return err
	}
	if lag.Total != 0 || info.Inflight != 0 {
		return d.fail("lag", "after worker B's acks, lag is %d with %d leases inflight; want 0 and 0: the store did not record the acks",
			lag.Total, info.Inflight)
	}
	d.line("lag", "0: every event acked; the frontier is at seq %d", d.appended[len(d.appended)-1].Sequence)

	if err := d.readBack(ctx, e); err != nil {
		return err
	}
	if err := d.query(ctx); err != nil {
		return err
	}
	d.note("ok: every fact held in %.1fs. %s was processed twice (at-least-once); only the current lease's ack counted.",
		time.Since(d.started).Seconds(), e.ID)
	return nil
}

// short abbreviates a lease ID for the timeline.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// cleanUp deletes the demo's stream from a store the user named (--dsn)
// once the demo has succeeded, unless --keep, and otherwise says how to
// look at it.
func (d *demo) cleanUp(err error) {
	if !d.created {
		return
	}
	if d.keep || err != nil {
		d.noteKept("stream")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout)
	defer cancel()
	if derr := d.c.DeleteStream(ctx, d.stream, rheo.DeleteOptions{Confirm: true}); derr != nil {
		d.note("could not delete the demo's stream %s: %v (rheo --dsn %s delete-stream %s --confirm deletes it)", d.stream, derr, redact(d.dsn), d.stream)
		return
	}
	d.note("deleted the demo's stream %s and its group (rheo demo --keep keeps them)", d.stream)
}

// noteKept says that the demo's store (or stream) stays, and how to look
// at it.
func (d *demo) noteKept(what string) {
	d.note("%s kept: rheo --dsn %s info %s %s", what, redact(d.dsn), d.stream, demoGroup)
}

func (d *demo) appendOrders(ctx context.Context) error {
	d.stream = demoStream
	err := d.c.CreateStream(ctx, d.stream, rheo.StreamConfig{})
	if errors.Is(err, rheo.ErrAlreadyExists) {
		// A store the user named may have run the demo before.
		d.stream = demoStream + "-" + randomSuffix()
		err = d.c.CreateStream(ctx, d.stream, rheo.StreamConfig{})
	}
	if err != nil {
		return d.fail("append", "create stream: %v", err)
	}
	d.created = true
	msgs := make([]rheo.Message, len(demoOrders))
	for i, o := range demoOrders {
		payload, _ := json.Marshal(map[string]any{"order_id": o.id, "customer": o.customer, "country": o.country, "total": o.total})
		msgs[i] = rheo.Message{ID: o.id, Type: "order_placed", Key: o.customer, Payload: payload,
			Metadata: map[string]string{rheo.MetaProducer: "rheo-demo", rheo.MetaCorrelationID: "checkout-" + o.customer}}
	}
	evs, err := d.c.AppendBatch(ctx, d.stream, msgs)
	if err != nil {
		return d.fail("append", "append to %s: %v", d.stream, err)
	}
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			return d.fail("append", "event %s got sequence %d, want %d", e.ID, e.Sequence, i+1)
		}
	}
	d.appended = evs
	d.line("append", "%d events to %s (seq 1..%d)", len(evs), d.stream, len(evs))
	return nil
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// workerAFetch starts worker A and returns the lease it took.
func (d *demo) workerAFetch(ctx context.Context) (rheo.Lease, error) {
	if d.inProcess {
		d.line("worker A", "started in this process (memory: cannot be shared with another one)")
		ls, err := d.c.Fetch(ctx, d.stream, demoGroup, rheo.FetchOptions{Limit: 1, ConsumerID: "worker-A", LeaseDuration: d.lease})
		if err != nil {
			return rheo.Lease{}, d.fail("fetch", "worker A: %v", err)
		}
		if len(ls) != 1 {
			return rheo.Lease{}, d.fail("fetch", "worker A got %d leases, want 1", len(ls))
		}
		return ls[0], nil
	}
	exe, err := d.a.executable()
	if err != nil {
		return rheo.Lease{}, fmt.Errorf("demo: cannot find the rheo binary to start workers: %w", err)
	}
	cmd := exec.Command(exe, d.workerArgs("fetch-and-hang", "worker-A")...)
	cmd.Env = append(os.Environ(), "RHEO_DSN=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return rheo.Lease{}, err
	}
	d.workerAErr = &bytes.Buffer{}
	cmd.Stderr = d.workerAErr
	if err := cmd.Start(); err != nil {
		return rheo.Lease{}, d.fail("worker A", "start %s: %v", exe, err)
	}
	d.workerA = cmd
	d.line("worker A", "started as process %d (%s demo-worker --mode fetch-and-hang)", cmd.Process.Pid, filepath.Base(exe))

	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadBytes('\n')
		got <- result{line, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(workerTimeout):
		return rheo.Lease{}, d.fail("fetch", "worker A printed no lease within %v", workerTimeout)
	case <-ctx.Done():
		return rheo.Lease{}, ctx.Err()
	}
	var lj leaseJSON
	if r.err != nil || json.Unmarshal(r.line, &lj) != nil {
		d.stopWorkerA()
		return rheo.Lease{}, d.fail("fetch", "worker A did not report a lease (%v): %s", r.err, oneLine(d.workerAErr.String()))
	}
	return lj.lease(), nil
}

func (d *demo) workerArgs(mode, consumer string) []string {
	return []string{"demo-worker", "--dsn", d.dsn, "--stream", d.stream, "--group", demoGroup,
		"--mode", mode, "--consumer", consumer, "--lease", d.lease.String()}
}

// killWorkerA SIGKILLs worker A: no deferred function, no ack, no goodbye.
func (d *demo) killWorkerA() error {
	if d.inProcess {
		d.line("abandon", "worker A drops L1 without acking (in place of a SIGKILL)")
		return nil
	}
	pid := d.workerA.Process.Pid
	if err := d.workerA.Process.Kill(); err != nil {
		return d.fail("kill", "SIGKILL worker A (pid %d): %v", pid, err)
	}
	err := d.workerA.Wait()
	d.workerA = nil
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Exited() {
		return d.fail("kill", "worker A (pid %d) was not killed by the signal: %v", pid, err)
	}
	d.line("kill", "SIGKILL worker A (pid %d) before it acked: %v", pid, err)
	return nil
}

func (d *demo) stopWorkerA() {
	if d.workerA == nil {
		return
	}
	_ = d.workerA.Process.Kill()
	_ = d.workerA.Wait()
	d.workerA = nil
}

func (d *demo) health(ctx context.Context) (rheo.Lag, rheo.GroupInfo, error) {
	info, err := d.c.GroupInfo(ctx, d.stream, demoGroup)
	if err != nil {
		return rheo.Lag{}, rheo.GroupInfo{}, d.fail("lag", "group info: %v", err)
	}
	return info.Lag, info, nil
}

// expire lets L1 run out: a real wait on a shared store, a clock jump in
// process.
func (d *demo) expire(ctx context.Context, l1 rheo.Lease) error {
	if d.inProcess {
		now := d.frozen.Now()
		d.frozen.Set(l1.ExpiresAt)
		d.line("expire", "frozen clock moved %v to L1's expiry; nobody renewed it", l1.ExpiresAt.Sub(now).Round(time.Millisecond))
		return nil
	}
	if d.fault == faultEarlyB {
		d.line("expire", "skipped: worker B starts while L1 is still live (fault %s)", faultEarlyB)
		return nil
	}
	start := time.Now()
	// A hair past ExpiresAt: a lease is expired when now >= ExpiresAt.
	wait := time.Until(l1.ExpiresAt) + 10*time.Millisecond
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	d.line("expire", "waited %.1fs of real time: L1 expired at %s; nobody renewed it",
		time.Since(start).Seconds(), l1.ExpiresAt.UTC().Format("15:04:05.000"))
	return nil
}

// workerResult is what worker B reports.
type workerResult struct {
	who    string
	leases []rheo.Lease
	acked  int
	ackErr string
}

// workerBReport is worker B's JSON line on stdout.
type workerBReport struct {
	Leases []leaseJSON `json:"leases"`
	Acked  int         `json:"acked"`
	Error  string      `json:"error,omitempty"`
}

func (d *demo) workerB(ctx context.Context) (workerResult, error) {
	if d.inProcess {
		ls, err := d.c.Fetch(ctx, d.stream, demoGroup, rheo.FetchOptions{Limit: 100, ConsumerID: "worker-B", LeaseDuration: d.lease})
		if err != nil {
			return workerResult{}, d.fail("worker B", "fetch: %v", err)
		}
		res := workerResult{who: "in-process B", leases: ls}
		if d.fault == faultSkipAck {
			res.acked = len(ls)
			return res, nil
		}
		if err := d.c.AckBatch(ctx, ls); err != nil {
			res.ackErr = err.Error()
			return res, nil
		}
		res.acked = len(ls)
		return res, nil
	}
	args := d.workerArgs("fetch-and-ack", "worker-B")
	if d.fault == faultSkipAck {
		args = append(args, "--fault", faultSkipAck)
	}
	out, pid, err := d.runWorker(ctx, nil, args)
	if err != nil {
		return workerResult{}, d.fail("worker B", "%v", err)
	}
	var rep workerBReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return workerResult{}, d.fail("worker B", "unreadable report %q: %v", out, err)
	}
	if rep.Error != "" && len(rep.Leases) == 0 {
		return workerResult{}, d.fail("worker B", "%s", rep.Error)
	}
	res := workerResult{who: fmt.Sprintf("process %d", pid), acked: rep.Acked, ackErr: rep.Error}
	for _, l := range rep.Leases {
		res.leases = append(res.leases, l.lease())
	}
	return res, nil
}

// resurrectA has worker A, back from the dead, ack with the lease it held.
func (d *demo) resurrectA(ctx context.Context, l1 rheo.Lease) (string, error) {
	if d.inProcess {
		return errCode(d.c.Ack(ctx, l1)), nil
	}
	in, _ := json.Marshal(toLeaseJSON(l1))
	out, _, err := d.runWorker(ctx, in, d.workerArgs("ack", "worker-A"))
	if err != nil {
		return "", d.fail("stale ack", "%v", err)
	}
	var rep struct {
		Result string `json:"result"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return "", d.fail("stale ack", "unreadable report %q: %v", out, err)
	}
	return rep.Result, nil
}

// runWorker runs a worker process to completion and returns its stdout.
func (d *demo) runWorker(ctx context.Context, stdin []byte, args []string) ([]byte, int, error) {
	exe, err := d.a.executable()
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, workerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "RHEO_DSN=")
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("worker process failed (%v): %s", err, oneLine(stderr.String()))
	}
	return stdout.Bytes(), cmd.Process.Pid, nil
}

// readBack checks that consumption changed nothing in the log.
func (d *demo) readBack(ctx context.Context, want rheo.Event) error {
	got, err := d.c.Read(ctx, d.stream, rheo.ReadOptions{Partition: want.Partition, After: want.Sequence - 1, Limit: 1})
	if err != nil {
		return d.fail("read", "read %s: %v", want.ID, err)
	}
	if len(got) != 1 {
		return d.fail("read", "read %s: got %d events, want 1", want.ID, len(got))
	}
	if diff := eventDiff(want, got[0]); diff != "" {
		return d.fail("read", "%s changed after consumption: %s", want.ID, diff)
	}
	d.line("read", "%s read back unchanged after 2 deliveries: %s", want.ID, got[0].Payload)
	return nil
}

// eventDiff names the first field where two events differ ("" if none).
func eventDiff(a, b rheo.Event) string {
	switch {
	case a.ID != b.ID:
		return fmt.Sprintf("id %q vs %q", a.ID, b.ID)
	case a.Stream != b.Stream || a.Partition != b.Partition || a.Sequence != b.Sequence:
		return fmt.Sprintf("position %s/%d/%d vs %s/%d/%d", a.Stream, a.Partition, a.Sequence, b.Stream, b.Partition, b.Sequence)
	case a.Type != b.Type || a.Key != b.Key:
		return fmt.Sprintf("type/key %q/%q vs %q/%q", a.Type, a.Key, b.Type, b.Key)
	case !a.Timestamp.Equal(b.Timestamp):
		return fmt.Sprintf("timestamp %s vs %s", a.Timestamp, b.Timestamp)
	case !jsonEqual(a.Payload, b.Payload):
		return fmt.Sprintf("payload %s vs %s", a.Payload, b.Payload)
	case !maps.Equal(a.Metadata, b.Metadata):
		return fmt.Sprintf("metadata %v vs %v", a.Metadata, b.Metadata)
	}
	return ""
}

// jsonEqual compares JSON documents by value: a store may reorder an
// object's keys (PostgreSQL's jsonb does) without changing the payload.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// query searches the log after consumption: everything is still there.
func (d *demo) query(ctx context.Context) error {
	const country = "NL"
	var want []int64
	for i, o := range demoOrders {
		if o.country == country {
			want = append(want, d.appended[i].Sequence)
		}
	}
	evs, err := d.c.Query(ctx, rheo.Query{Stream: d.stream, Type: "order_placed", Payload: map[string]any{"country": country}})
	if err != nil {
		return d.fail("query", "%v", err)
	}
	var got []int64
	for _, e := range evs {
		got = append(got, e.Sequence)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return d.fail("query", "type=order_placed country=%s matched seq %v, want %v", country, got, want)
	}
	all, err := d.c.Query(ctx, rheo.Query{Stream: d.stream})
	if err != nil {
		return d.fail("query", "%v", err)
	}
	if len(all) != len(d.appended) {
		return d.fail("query", "the log holds %d events after consumption, want %d", len(all), len(d.appended))
	}
	seqs := make([]string, len(got))
	for i, s := range got {
		seqs[i] = fmt.Sprint(s)
	}
	d.line("query", "type=order_placed country=%s -> seq %s; all %d events still in the log",
		country, strings.Join(seqs, ", "), len(all))
	return nil
}
