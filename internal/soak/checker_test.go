package soak_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo/internal/soak"
)

// t0 is the hand-made journals' epoch; at(ms) is t0 plus ms milliseconds.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }

// clean is a run that violates nothing: three events on one partition,
// e1 acked, e2 nacked once and then acked by another worker, e3 (n=97)
// rejected; a frontier sample after e1 settled.
func clean() soak.Input {
	return soak.Input{
		MaxAttempts: 5,
		Rejected:    soak.Rejects,
		Appended: []soak.Record{
			{Kind: soak.KindAppend, Event: "e1", N: 1, Partition: 0, Seq: 1, T: at(0)},
			{Kind: soak.KindAppend, Event: "e2", N: 3, Partition: 0, Seq: 2, T: at(1)},
			{Kind: soak.KindAppend, Event: "e3", N: 97, Partition: 0, Seq: 3, T: at(2)},
		},
		Records: []soak.Record{
			{Kind: soak.KindDeliver, Event: "e1", Lease: "L1", Attempt: 1, Worker: "w1.1", Outcome: soak.OutcomeAck, T: at(10)},
			{Kind: soak.KindSettle, Event: "e1", Lease: "L1", Attempt: 1, Worker: "w1.1", Outcome: soak.OutcomeAck, Result: soak.ResultOK, T: at(12)},
			{Kind: soak.KindDeliver, Event: "e2", Lease: "L2", Attempt: 1, Worker: "w1.1", Outcome: soak.OutcomeRetry, T: at(11)},
			{Kind: soak.KindSettle, Event: "e2", Lease: "L2", Attempt: 1, Worker: "w1.1", Outcome: soak.OutcomeRetry, Result: soak.ResultOK, T: at(13)},
			{Kind: soak.KindDeliver, Event: "e2", Lease: "L3", Attempt: 2, Worker: "w2.1", Outcome: soak.OutcomeAck, T: at(40)},
			{Kind: soak.KindSettle, Event: "e2", Lease: "L3", Attempt: 2, Worker: "w2.1", Outcome: soak.OutcomeAck, Result: soak.ResultOK, T: at(42)},
			{Kind: soak.KindDeliver, Event: "e3", Lease: "L4", Attempt: 1, Worker: "w2.1", Outcome: soak.OutcomeReject, T: at(41)},
			{Kind: soak.KindSettle, Event: "e3", Lease: "L4", Attempt: 1, Worker: "w2.1", Outcome: soak.OutcomeReject, Result: soak.ResultOK, T: at(43)},
		},
		DeadLetters: []soak.DeadLetter{{Event: "e3", Reason: soak.RejectReason(97), Attempts: 1, At: time.Unix(0, at(42))}},
		Samples: []soak.Sample{
			{Start: time.Unix(0, at(20)), End: time.Unix(0, at(21)), Frontier: map[int]int64{0: 1}},
			{Start: time.Unix(0, at(50)), End: time.Unix(0, at(51)), Frontier: map[int]int64{0: 3}},
		},
		Stored: 3,
	}
}

func violations(t *testing.T, in soak.Input) string {
	t.Helper()
	return strings.Join(soak.Check(in).Violations, "\n")
}

func TestCheckerCleanRun(t *testing.T) {
	res := soak.Check(clean())
	require.Empty(t, res.Violations)
	require.Equal(t, 3, res.Appended)
	require.Equal(t, 4, res.Deliveries)
	require.Equal(t, 1, res.Retries)
	require.Equal(t, 1, res.Rejected)
	require.Empty(t, res.Duplicates)
}

func TestCheckerLostEvent(t *testing.T) {
	in := clean()
	in.Appended = append(in.Appended, soak.Record{Kind: soak.KindAppend, Event: "e4", N: 4, Partition: 1, Seq: 1, T: at(3)})
	in.Stored = 4
	require.Contains(t, violations(t, in), "event e4 (partition 1 sequence 1) was lost")
}

func TestCheckerEventNeverSettled(t *testing.T) {
	in := clean()
	// e2's second delivery acks, but the ack failed for good and nothing
	// came after it.
	in.Records[5].Result = soak.ResultFailed
	require.Contains(t, violations(t, in), "event e2 was never settled")
}

func TestCheckerStaleSettleSucceeded(t *testing.T) {
	in := clean()
	// w1.1's first lease of e2 is acked successfully although w2.1 had
	// claimed e2 again (attempt 2) and acked it too.
	in.Records[2].Outcome = soak.OutcomeAck
	in.Records[3].Outcome, in.Records[3].Result = soak.OutcomeAck, soak.ResultOK
	v := violations(t, in)
	require.Contains(t, v, "event e2 settled for good 2 times")
	require.Contains(t, v, "stale settle succeeded: event e2 lease L2")
}

func TestCheckerStaleSettleAloneSucceeded(t *testing.T) {
	in := clean()
	// The old lease's ack succeeds and the new holder's ack is refused:
	// still a stale settle that succeeded.
	in.Records[2].Outcome = soak.OutcomeAck
	in.Records[3].Outcome, in.Records[3].Result = soak.OutcomeAck, soak.ResultOK
	in.Records[5].Result = soak.ResultLost
	require.Contains(t, violations(t, in), "stale settle succeeded: event e2 lease L2 (attempt 1, w1.1) settled while lease L3")
}

func TestCheckerFrontierPastUnsettledEvent(t *testing.T) {
	in := clean()
	// A frontier read before e2's terminal delivery even started.
	in.Samples = append(in.Samples, soak.Sample{Start: time.Unix(0, at(30)), End: time.Unix(0, at(31)), Frontier: map[int]int64{0: 2}})
	require.Contains(t, violations(t, in), "frontier 2 of partition 0 read at")
	require.Contains(t, violations(t, in), "passed event e2 (sequence 2)")

	in = clean()
	in.Samples = append(in.Samples, soak.Sample{Start: time.Unix(0, at(30)), End: time.Unix(0, at(31)), Frontier: map[int]int64{0: 9}})
	require.Contains(t, violations(t, in), "frontier 9 of partition 0 is beyond every appended event")
}

func TestCheckerLeaseLostBeforeItsHandlerRan(t *testing.T) {
	in := clean()
	in.Records = append(in.Records, soak.Record{Kind: soak.KindLost, Event: "e1", Lease: "L9", Attempt: 1, Worker: "w3.1", T: at(5)})
	require.Empty(t, soak.Check(in).Violations)
	in.Records = append(in.Records, soak.Record{Kind: soak.KindSettle, Event: "e1", Lease: "L9", Attempt: 1, Worker: "w3.1",
		Outcome: soak.OutcomeAck, Result: soak.ResultOK, T: at(6)})
	require.Contains(t, violations(t, in), "settle record of lease L9 (event e1) that no handler saw")
}

func TestCheckerUnexplainedDuplicate(t *testing.T) {
	in := clean()
	// e1 delivered again although its first lease was never settled and
	// its worker never killed.
	in.Records[1] = soak.Record{Kind: soak.KindDeliver, Event: "e1", Lease: "L0", Attempt: 2, Worker: "w2.1", Outcome: soak.OutcomeAck, T: at(15)}
	in.Records = append(in.Records, soak.Record{Kind: soak.KindSettle, Event: "e1", Lease: "L0", Attempt: 2, Worker: "w2.1", Outcome: soak.OutcomeAck, Result: soak.ResultOK, T: at(16)})
	require.Contains(t, violations(t, in), "unexplained duplicate: event e1 lease L1")

	// The same, explained by a kill of w1.1 after its delivery.
	in.Killed = map[string]time.Time{"w1.1": time.Unix(0, at(14))}
	res := soak.Check(in)
	require.Empty(t, res.Violations)
	require.Equal(t, map[string]int{soak.CauseKilled: 1}, res.Duplicates)
}

func TestCheckerDeadLetters(t *testing.T) {
	in := clean()
	in.DeadLetters = nil
	require.Contains(t, violations(t, in), "rejected event e3 is not a dead letter")

	in = clean()
	in.DeadLetters = append(in.DeadLetters, soak.DeadLetter{Event: "e1", Reason: "max_attempts: lease expired", Attempts: 2})
	v := violations(t, in)
	require.Contains(t, v, "event e1 dead-lettered (reason \"max_attempts: lease expired\", 2 attempts) but neither rejected nor out of attempts")
	require.Contains(t, v, "event e1 acked (lease L1) and also a dead letter")
}

func TestCheckerStoreAndLag(t *testing.T) {
	in := clean()
	in.Stored, in.FinalLag = 4, 1
	v := violations(t, in)
	require.Contains(t, v, "the store holds 4 events, the producer appended 3")
	require.Contains(t, v, "lag ended at 1, not 0")
}

func TestJournalSkipsTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.journal")
	j, err := soak.OpenJournal(path)
	require.NoError(t, err)
	require.NoError(t, j.Write(soak.Record{Kind: soak.KindDeliver, Event: "e1", Lease: "L1"}))
	require.NoError(t, j.Close())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"k":"settle","e":"e1`) // a kill mid-write
	require.NoError(t, err)
	require.NoError(t, f.Close())
	recs, err := soak.ReadJournal(path)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "L1", recs[0].Lease)

	require.NoError(t, os.WriteFile(path, []byte("not json\n"), 0o644))
	_, err = soak.ReadJournal(path)
	require.ErrorContains(t, err, "line 1")
}

func TestParseStores(t *testing.T) {
	s, err := soak.ParseStores("sqlite, redis")
	require.NoError(t, err)
	require.Equal(t, []string{"sqlite", "redis"}, s)
	_, err = soak.ParseStores("sqlite,mysql")
	require.ErrorContains(t, err, `unknown soak store "mysql"`)
	_, err = soak.ParseStores(" , ")
	require.ErrorContains(t, err, "no soak store")
}

// A claim the server lost in a crash (PostgreSQL claims commit without
// waiting for their WAL flush) makes the event come back with the same
// attempt, and the lost claim's ack is refused: explained by a crash
// between the two deliveries, a violation without one.
func TestCheckerClaimLostInACrash(t *testing.T) {
	in := clean()
	in.Records[0].Outcome, in.Records[1].Result = soak.OutcomeAck, soak.ResultLost
	in.Records = append(in.Records,
		soak.Record{Kind: soak.KindDeliver, Event: "e1", Lease: "L9", Attempt: 1, Worker: "w2.1", Outcome: soak.OutcomeAck, T: at(30)},
		soak.Record{Kind: soak.KindSettle, Event: "e1", Lease: "L9", Attempt: 1, Worker: "w2.1", Outcome: soak.OutcomeAck, Result: soak.ResultOK, T: at(31)})
	in.Samples = in.Samples[1:] // the early sample saw e1 settled by the lost claim
	require.Contains(t, violations(t, in), "claimed again with attempt 1 (lease L9, w2.1) after lease L1")
	in.Restarts = []soak.Interval{{From: time.Unix(0, at(15)), To: time.Unix(0, at(25))}}
	res := soak.Check(in)
	require.Empty(t, res.Violations)
	require.Equal(t, 1, res.Duplicates[soak.CauseCrash])
	// A lost claim whose ack succeeded is a violation even with a crash.
	in.Records[1].Result = soak.ResultOK
	require.Contains(t, violations(t, in), "lease L1 settled for good, yet its claim was lost")
}
