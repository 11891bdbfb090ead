package soak

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// DeadLetter is a dead letter as the store reports it.
type DeadLetter struct {
	Event    string
	Reason   string
	Attempts int
	At       time.Time
}

// Sample is one reading of the group's frontier: Lag was called at Start
// and returned at End.
type Sample struct {
	Start, End time.Time
	Frontier   map[int]int64 // per partition
}

// Input is everything the checker judges.
type Input struct {
	MaxAttempts int
	// Rejected says whether the handler rejects the event with payload
	// number n (it does so on every delivery).
	Rejected func(n int64) bool
	// Appended are the producer's append records (one per event).
	Appended []Record
	// Records are the workers' deliver, settle and lost records.
	Records []Record
	// Killed maps each SIGKILLed worker incarnation to when it was killed.
	Killed map[string]time.Time
	// Restarts are when the store's server crashed and restarted. A claim
	// the server had not yet made durable (PostgreSQL commits claims
	// without waiting for their WAL flush) is lost in such a crash: the
	// event is claimed again with the same attempt, and the lost claim's
	// settles are refused as stale.
	Restarts []Interval
	// DeadLetters are the group's dead letters, read after the run.
	DeadLetters []DeadLetter
	// Samples are the frontier readings taken during the run.
	Samples []Sample
	// FinalLag is the group's total lag after the drain; Stored is the sum
	// of the partitions' high watermarks.
	FinalLag, Stored int64
}

// Result is the checker's verdict and the run's figures.
type Result struct {
	Violations []string
	Appended   int
	Deliveries int
	// Duplicates counts deliveries after the first that no successful nack
	// asked for, by what ended the earlier delivery's lease.
	Duplicates map[string]int
	Retries    int // deliveries asked for by a successful nack
	Rejected   int // dead letters with the handler's reason
	Exhausted  int // dead letters after MaxAttempts
	// Latency from a successful append to the successful ack of the event.
	P50, P99 time.Duration
}

// OK reports whether no invariant was violated.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// Causes of a duplicate delivery.
const (
	CauseKilled    = "killed worker"
	CauseLost      = "lost lease"
	CauseAmbiguous = "ambiguous settle"
	CauseFailed    = "failed settle"
	CauseCrash     = "claim lost in a server crash"
)

type delivery struct {
	Record  // the deliver record
	settles []Record
	lost    bool
}

// result sums up a lease's settle records.
func (d *delivery) result(maxAttempts int) (terminalOK, nackOK, unknown, lost, failed bool) {
	lost = d.lost
	for _, s := range d.settles {
		switch s.Result {
		case ResultOK:
			if s.Outcome != OutcomeRetry || d.Attempt >= maxAttempts {
				terminalOK = true
			} else {
				nackOK = true
			}
		case ResultUnknown:
			unknown = true
		case ResultLost:
			lost = true
		default:
			failed = true
		}
	}
	return
}

// terminalDecision reports whether the handler's decision ends the event
// for the group when its settle lands.
func (d *delivery) terminalDecision(maxAttempts int) bool {
	return d.Outcome != OutcomeRetry || d.Attempt >= maxAttempts
}

// Check judges a run. The invariants:
//
//  1. every appended event was acked or dead-lettered: the store's lag is 0
//     and holds exactly the appended events, every event was delivered, and
//     its last delivery settled it (or its outcome is unknown: an ambiguous
//     settle, or a worker killed after its handler returned), or it is a
//     dead letter;
//  2. the dead letters are exactly the rejected events plus events that
//     exhausted MaxAttempts, each with its reason;
//  3. no settle of a stale lease succeeded: at most one successful terminal
//     settle per event, and it is that of the event's last claim (no
//     delivery has a higher attempt);
//  4. every duplicate delivery is explained by a killed worker, a lost
//     (expired and taken over) lease, or an ambiguous or failed settle;
//  5. no sampled frontier passed an unsettled event: every event at or below
//     it had a delivery whose handler had decided to settle it for good
//     (recorded before the handler returned, so before its settle) before
//     the sample, or was dead-lettered by expiry before it;
//  6. lag ends at 0.
func Check(in Input) Result {
	res := Result{Duplicates: map[string]int{}}
	bad := func(format string, args ...any) {
		if len(res.Violations) < 50 {
			res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
		} else if len(res.Violations) == 50 {
			res.Violations = append(res.Violations, "… further violations left out")
		}
	}
	if in.MaxAttempts < 1 {
		bad("checker input: MaxAttempts %d", in.MaxAttempts)
		return res
	}
	if in.Rejected == nil {
		in.Rejected = func(int64) bool { return false }
	}

	type event struct {
		app        Record
		deliveries []*delivery
	}
	events := map[string]*event{}
	byPos := map[int][]*event{} // per partition, sorted by sequence
	for _, a := range in.Appended {
		if _, dup := events[a.Event]; dup {
			bad("event %s appended twice as two records", a.Event)
			continue
		}
		e := &event{app: a}
		events[a.Event] = e
		byPos[a.Partition] = append(byPos[a.Partition], e)
	}
	for p := range byPos {
		sort.Slice(byPos[p], func(i, j int) bool { return byPos[p][i].app.Seq < byPos[p][j].app.Seq })
		for i := 1; i < len(byPos[p]); i++ {
			if byPos[p][i].app.Seq == byPos[p][i-1].app.Seq {
				bad("events %s and %s share partition %d sequence %d", byPos[p][i-1].app.Event, byPos[p][i].app.Event, p, byPos[p][i].app.Seq)
			}
		}
	}
	res.Appended = len(events)

	leases := map[string]*delivery{}
	for _, r := range in.Records {
		if r.Kind != KindDeliver {
			continue
		}
		res.Deliveries++
		e := events[r.Event]
		if e == nil {
			bad("delivery of event %s that was never appended (lease %s, worker %s)", r.Event, r.Lease, r.Worker)
			continue
		}
		if _, dup := leases[r.Lease]; dup {
			bad("lease %s delivered twice", r.Lease)
			continue
		}
		d := &delivery{Record: r}
		leases[r.Lease] = d
		e.deliveries = append(e.deliveries, d)
	}
	for _, r := range in.Records {
		if r.Kind != KindSettle && r.Kind != KindLost {
			continue
		}
		d := leases[r.Lease]
		if d == nil {
			if r.Kind == KindLost {
				continue // lost while it waited for a handler: never delivered
			}
			bad("%s record of lease %s (event %s) that no handler saw", r.Kind, r.Lease, r.Event)
			continue
		}
		if r.Kind == KindLost {
			d.lost = true
		} else {
			d.settles = append(d.settles, r)
		}
	}

	dead := map[string]DeadLetter{}
	for _, dl := range in.DeadLetters {
		e := events[dl.Event]
		if e == nil {
			bad("dead letter %s was never appended", dl.Event)
			continue
		}
		dead[dl.Event] = dl
		switch {
		case in.Rejected(e.app.N):
			if dl.Reason != RejectReason(e.app.N) {
				bad("rejected event %s dead-lettered with reason %q, want %q", dl.Event, dl.Reason, RejectReason(e.app.N))
			}
			res.Rejected++
		case strings.HasPrefix(dl.Reason, "max_attempts:") && dl.Attempts >= in.MaxAttempts:
			res.Exhausted++
		default:
			bad("event %s dead-lettered (reason %q, %d attempts) but neither rejected nor out of attempts", dl.Event, dl.Reason, dl.Attempts)
		}
	}

	var latencies []time.Duration
	settledAfter := map[*event]int64{} // the earliest time its terminal settle may have landed; 0: never
	for _, id := range sortedKeys(events) {
		e := events[id]
		if in.Rejected(e.app.N) {
			if _, ok := dead[id]; !ok {
				bad("rejected event %s is not a dead letter", id)
			}
		}
		if len(e.deliveries) == 0 {
			if dl, ok := dead[id]; ok && strings.HasPrefix(dl.Reason, "max_attempts:") {
				settledAfter[e] = dl.At.UnixNano()
				continue // every claim was lost (ambiguous fetches) and then it expired
			}
			bad("event %s (partition %d sequence %d) was lost: appended, never delivered", id, e.app.Partition, e.app.Seq)
			continue
		}
		// By attempt, and deliveries of one attempt (a claim lost in a
		// server crash and made again) by when they were delivered.
		sort.SliceStable(e.deliveries, func(i, j int) bool {
			a, b := e.deliveries[i], e.deliveries[j]
			if a.Attempt != b.Attempt {
				return a.Attempt < b.Attempt
			}
			return a.T < b.T
		})
		last := e.deliveries[len(e.deliveries)-1]

		// 3: stale settles.
		var terminal []*delivery
		for _, d := range e.deliveries {
			if t, _, _, _, _ := d.result(in.MaxAttempts); t {
				terminal = append(terminal, d)
			}
		}
		if len(terminal) > 1 {
			bad("event %s settled for good %d times (leases %s)", id, len(terminal), leaseIDs(terminal))
		}
		for _, d := range terminal {
			if d != last {
				bad("stale settle succeeded: event %s lease %s (attempt %d, %s) settled while lease %s (attempt %d, %s) was its last claim",
					id, d.Lease, d.Attempt, d.Worker, last.Lease, last.Attempt, last.Worker)
			}
			if d.Outcome == OutcomeAck {
				if _, ok := dead[id]; ok {
					bad("event %s acked (lease %s) and also a dead letter", id, d.Lease)
				}
			}
		}

		// 4: duplicates, and which deliveries may have ended the event.
		var candidates []*delivery
		for i, d := range e.deliveries {
			terminalOK, nackOK, unknown, lost, failed := d.result(in.MaxAttempts)
			killedAt, killed := in.Killed[d.Worker]
			killed = killed && killedAt.UnixNano() >= d.T
			settled := len(d.settles) > 0 || d.lost
			if d.terminalDecision(in.MaxAttempts) && (terminalOK || unknown || (!settled && killed)) {
				candidates = append(candidates, d)
			}
			if i == len(e.deliveries)-1 {
				continue
			}
			next := e.deliveries[i+1]
			if next.Attempt <= d.Attempt {
				// The store forgot d's claim: only a server crash between
				// the two deliveries explains that, and then d's terminal
				// settle cannot have succeeded.
				if !crashedBetween(in.Restarts, d.T, next.T) {
					bad("event %s claimed again with attempt %d (lease %s, %s) after lease %s (attempt %d, %s) and no server crash between",
						id, next.Attempt, next.Lease, next.Worker, d.Lease, d.Attempt, d.Worker)
				} else if terminalOK {
					bad("event %s: lease %s settled for good, yet its claim was lost in a server crash", id, d.Lease)
				}
				res.Duplicates[CauseCrash]++
				continue
			}
			switch {
			case nackOK:
				res.Retries++
			case lost:
				res.Duplicates[CauseLost]++
			case unknown:
				res.Duplicates[CauseAmbiguous]++
			case failed:
				res.Duplicates[CauseFailed]++
			case !settled && killed:
				res.Duplicates[CauseKilled]++
			default:
				bad("unexplained duplicate: event %s lease %s (attempt %d, %s) was followed by attempt %d though it was %s and its worker was not killed",
					id, d.Lease, d.Attempt, d.Worker, e.deliveries[i+1].Attempt, describe(d))
			}
		}

		// 1 and 5: what ended the event.
		if len(terminal) == 1 {
			candidates = terminal
			if terminal[0].Outcome == OutcomeAck {
				for _, s := range terminal[0].settles {
					if s.Result == ResultOK {
						latencies = append(latencies, time.Duration(s.T-e.app.T))
					}
				}
			}
		}
		switch {
		case len(candidates) > 0:
			settledAfter[e] = candidates[0].T
			for _, c := range candidates[1:] {
				settledAfter[e] = min(settledAfter[e], c.T)
			}
		default:
			if dl, ok := dead[id]; ok && strings.HasPrefix(dl.Reason, "max_attempts:") {
				settledAfter[e] = dl.At.UnixNano()
			} else {
				bad("event %s was never settled: its last delivery (lease %s, attempt %d, %s) was %s", id, last.Lease, last.Attempt, last.Worker, describe(last))
			}
		}
	}

	// 5: the frontier.
	for _, s := range in.Samples {
		for p, f := range s.Frontier {
			for _, e := range byPos[p] {
				if e.app.Seq > f {
					break
				}
				at, ok := settledAfter[e]
				if ok && at > s.End.UnixNano() {
					bad("frontier %d of partition %d read at %s passed event %s (sequence %d), unsettled until %s",
						f, p, s.End.Format(time.StampMicro), e.app.Event, e.app.Seq, time.Unix(0, at).Format(time.StampMicro))
				}
			}
			if n := len(byPos[p]); f > 0 && (n == 0 || byPos[p][n-1].app.Seq < f) {
				bad("frontier %d of partition %d is beyond every appended event", f, p)
			}
		}
	}

	// 1 and 6: the store.
	if in.Stored != int64(len(events)) {
		bad("the store holds %d events, the producer appended %d", in.Stored, len(events))
	}
	if in.FinalLag != 0 {
		bad("lag ended at %d, not 0", in.FinalLag)
	}

	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50 = latencies[n/2]
		res.P99 = latencies[min(n-1, n*99/100)]
	}
	return res
}

// RejectReason is the dead-letter reason of a rejected event.
func RejectReason(n int64) string { return fmt.Sprintf("soak: reject n=%d", n) }

func describe(d *delivery) string {
	if len(d.settles) == 0 && !d.lost {
		return "never settled"
	}
	var parts []string
	for _, s := range d.settles {
		parts = append(parts, s.Outcome+" "+s.Result)
	}
	if d.lost {
		parts = append(parts, "lost on renewal")
	}
	return strings.Join(parts, ", ")
}

func leaseIDs(ds []*delivery) string {
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.Lease)
	}
	return strings.Join(ids, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Interval is a span of time.
type Interval struct{ From, To time.Time }

// crashedBetween reports whether a server crash overlapped the time from
// a claim's delivery (a, UnixNano; widened by 10 s, since the claim was
// made before its handler recorded it) to the next delivery (b).
func crashedBetween(restarts []Interval, a, b int64) bool {
	a -= int64(10 * time.Second)
	for _, r := range restarts {
		if r.From.UnixNano() <= b && r.To.UnixNano() >= a {
			return true
		}
	}
	return false
}
