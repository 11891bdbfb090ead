package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func TestHelpDescribesEveryCommand(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out := c.ok("help")
	for _, name := range []string{"demo", "migrate", "streams", "groups", "create-stream", "create-group",
		"append", "query", "tail", "lag", "info", "dead-letters", "redrive", "replay", "reset", "bench"} {
		require.Contains(t, out, "  "+name+" ", "help lists %s", name)
		sub := c.ok(name, "--help")
		require.Contains(t, sub, "Usage:", "%s --help", name)
		require.Contains(t, sub, "rheo "+name, "%s --help", name)
	}
	require.NotContains(t, out, "demo-worker", "the worker protocol stays hidden")
	require.Contains(t, c.ok("append", "--help"), "one JSON object per line")
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand"`},
		{[]string{"streams", "--nosuchflag"}, "unknown flag: --nosuchflag"},
		{[]string{"lag", "orders"}, "accepts 2 arg(s)"},
		{[]string{"query", "orders", "--order", "sequence:sideways"}, "--order"},
		{[]string{"query", "orders", "--meta", "novalue"}, "want key=value"},
		{[]string{"query", "orders", "--field", "=NL"}, `--field "=NL": want path=value`},
		{[]string{"query", "orders", "--from", "yesterday"}, "RFC 3339"},
		{[]string{"create-group", "orders", "g", "--start", "soon"}, "--start"},
		{[]string{"tail", "orders", "--interval", "0s"}, "--interval"},
		{[]string{"replay", "orders", "g"}, "exactly one range"},
		{[]string{"bench", "--events", "0"}, "must be positive"},
		{[]string{"append", "orders", "--partition", "x"}, "invalid argument"},
	} {
		r := c.fails(exitUsage, tc.want, tc.args...)
		require.Contains(t, r.err, "rheo help", "a usage error points at help: %v", tc.args)
	}
}

func TestRunErrorsExitOneWithOneLine(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders")
	r := c.fails(exitError, `stream not found: stream "nosuch"`, "lag", "nosuch", "g")
	require.Equal(t, 1, strings.Count(r.err, "\n"), "exactly one line: %q", r.err)
	require.Empty(t, r.out)

	c.fails(exitError, "group not found", "info", "orders", "nosuch")
	c.fails(exitError, "already exists", "create-stream", "orders")
}

func TestOpenUnknownSchemeFails(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	code := run(context.Background(), []string{"--dsn", "nosuch://x", "streams"}, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut.String(), `rheo: open nosuch://x: invalid argument: no backend registered for DSN scheme "nosuch"`)
}

// A DSN with a bad parameter fails with one line naming it, and an embedded
// store is not created, even by a command that creates one.
func TestOpenDSNParameterMistakeFails(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "never.db")
	for dsn, want := range map[string]string{
		"memory:foo":                           `the memory store takes no path or parameters; use "memory:"`,
		"sqlite:" + path + "?busy_timeout=-1s": "busy_timeout=-1s is negative",
		"sqlite:" + path + "?synchronous=sometimes&synchronous=full": "synchronous is given twice",
		"redis://127.0.0.1:1/0?key_prefix=":                          "key_prefix is empty",
		"postgres://u@127.0.0.1:1/db?rheo_schem=app":                 `unknown parameter "rheo_schem": did you mean rheo_schema?`,
	} {
		var out, errOut strings.Builder
		code := run(context.Background(), []string{"--dsn", dsn, "create-stream", "orders"}, strings.NewReader(""), &out, &errOut)
		require.Equal(t, exitError, code, dsn)
		require.Contains(t, errOut.String(), "rheo: open "+dsn+": invalid argument: ")
		require.Contains(t, errOut.String(), want)
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
	}
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing is written")
}

func TestDSNComesFromEnvironmentThenDefault(t *testing.T) {
	t.Parallel()
	a := newApp(nil, nil, nil)
	a.getenv = func(string) string { return "" }
	require.Equal(t, "sqlite:rheo.db", a.storeDSN())
	a.getenv = func(k string) string {
		if k == "RHEO_DSN" {
			return "memory:"
		}
		return ""
	}
	require.Equal(t, "memory:", a.storeDSN())
	a.dsn = "sqlite:x.db"
	require.Equal(t, "sqlite:x.db", a.storeDSN(), "--dsn wins over RHEO_DSN")
}

func TestRedactHidesPasswords(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://rheo:xxxxx@db:5432/x", redact("postgres://rheo:secret@db:5432/x"))
	require.Equal(t, "redis://db:6379/0", redact("redis://db:6379/0"))
	require.Equal(t, "sqlite:/tmp/a.db", redact("sqlite:/tmp/a.db"))
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	require.Contains(t, c.ok("migrate"), "migrated "+c.dsn)
	require.Contains(t, c.ok("migrate"), "migrated "+c.dsn)
	var v map[string]any
	c.jsonOK(&v, "migrate")
	require.Equal(t, true, v["migrated"])
}

func TestCreateStreamThenStreamsListsIt(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	require.Contains(t, c.ok("create-stream", "orders", "--partitions", "3"), "created stream orders (3 partitions)")
	c.ok("create-stream", "audit")
	out := c.ok("streams")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^STREAM\s+PARTITIONS\s+EVENTS\s+TRIMMED\s+RETENTION\s+CREATED$`, lines[0])
	require.Regexp(t, `^audit\s+1\s+0\s+0\s+none\s+\d{4}-`, lines[1])
	require.Regexp(t, `^orders\s+3\s+0\s+0\s+none\s+\d{4}-`, lines[2])

	var streams []struct {
		Name       string `json:"name"`
		Partitions int    `json:"partitions"`
	}
	c.jsonOK(&streams, "streams")
	require.Len(t, streams, 2)
	require.Equal(t, "orders", streams[1].Name)
	require.Equal(t, 3, streams[1].Partitions)

	c.fails(exitUsage, "--partitions -1: want 1 to 1024", "create-stream", "bad", "--partitions", "-1")
}

func TestAppendPayloadArgument(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders", "--partitions", "2")
	out := c.ok("append", "orders", `{"order_id": "o-1",  "total": 42}`, "--type", "order_placed",
		"--partition", "1", "--meta", "producer=shop", "--meta", "note=a=b", "--id", "evt-1")
	require.Regexp(t, `(?m)^1\s+1\s+evt-1\s+order_placed\s+-$`, out)

	evs, _ := c.events()
	require.Len(t, evs, 1)
	e := evs[0]
	require.Equal(t, "evt-1", e.ID)
	require.Equal(t, 1, e.Partition)
	require.JSONEq(t, `{"order_id":"o-1","total":42}`, string(e.Payload))
	require.Equal(t, map[string]string{"producer": "shop", "note": "a=b"}, e.Metadata)

	// The same ID again writes nothing and returns the stored event.
	c.ok("append", "orders", `{"other":true}`, "--id", "evt-1")
	evs, _ = c.events()
	require.Len(t, evs, 1)
}

func TestAppendReadsOneJSONObjectPerStdinLine(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders")
	stdin := "{\"n\":1}\n\n  {\"n\":2}\n{\"n\":3}"
	var evs []eventJSON
	out := c.okStdin(stdin, "append", "orders", "--type", "tick", "--key", "k", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &evs))
	require.Len(t, evs, 3)
	for i, e := range evs {
		require.Equal(t, int64(i+1), e.Sequence)
		require.Equal(t, "tick", e.Type)
		require.Equal(t, "k", e.Key)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i+1), string(e.Payload))
	}

	// Many events print a summary per partition instead of a row each.
	var many strings.Builder
	for i := range 25 {
		fmt.Fprintf(&many, "{\"n\":%d}\n", i)
	}
	out = c.okStdin(many.String(), "append", "orders")
	require.Contains(t, out, "appended 25 events to orders")
	require.Regexp(t, `(?m)^0\s+25\s+4\.\.28$`, out)
}

func TestAppendRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders")
	c.fails(exitError, "payload must be a JSON object", "append", "orders", `[1,2]`)
	c.failsStdin("{\"ok\":1}\nnot json\n", exitError, "stdin line 2 is not valid JSON", "append", "orders")
	c.failsStdin("{\"ok\":1}\n[2]\n", exitError, "stdin line 2: invalid argument: payload must be a JSON object", "append", "orders")
	c.failsStdin("{\"ok\":1}\n{\"big\":\""+strings.Repeat("x", maxInputLine)+"\"}\n", exitError,
		"stdin line 2 is longer than 16 MiB, the most one line may hold; nothing was appended", "append", "orders")
	c.fails(exitUsage, "no payload given", "append", "orders")
	c.fails(exitUsage, "--id is empty: give an event ID, or leave the flag out", "append", "orders", `{}`, "--id", "")
	c.failsStdin("{\"type\":5,\"payload\":{}}\n", exitError, `stdin line 1: envelope member "type" must be a string, not a JSON number`, "append", "orders")
	c.failsStdin("{\"partition\":\"1\",\"payload\":{}}\n", exitError, `envelope member "partition" must be an integer, not a JSON string`, "append", "orders")
	c.failsStdin("{\"metadata\":[1],\"payload\":{}}\n", exitError, `envelope member "metadata" must be an object of strings, not a JSON array`, "append", "orders")
	c.fails(exitUsage, "timestamp is already ordered by", "query", "orders", "--order", "timestamp:desc", "--order", "timestamp:asc")
	c.fails(exitError, "invalid partition", "append", "orders", `{}`, "--partition", "5")

	evs, _ := c.events()
	require.Empty(t, evs, "a failed append writes nothing")
}

// seedOrders appends a known set of events for the query tests.
func seedOrders(t *testing.T, c *cli) {
	t.Helper()
	c.ok("create-stream", "orders", "--partitions", "2")
	lines := []struct {
		typ, part, meta, payload string
	}{
		{"order_placed", "0", "corr=a", `{"country":"NL","total":42,"vip":true,"customer":{"tier":"gold"}}`},
		{"order_placed", "1", "corr=b", `{"country":"FR","total":10,"vip":false,"customer":{"tier":"basic"}}`},
		{"order_shipped", "0", "corr=a", `{"country":"NL","total":42,"vip":true}`},
		{"order_placed", "0", "corr=c", `{"country":"NL","total":"42","vip":null}`},
		{"order_placed", "1", "corr=a", `{"country":"DE","total":7.5}`},
	}
	for _, l := range lines {
		c.ok("append", "orders", l.payload, "--type", l.typ, "--partition", l.part, "--meta", l.meta)
	}
}

func queryIDs(t *testing.T, c *cli, args ...string) (seqs []string, next string) {
	t.Helper()
	evs, next := c.events(args...)
	for _, e := range evs {
		seqs = append(seqs, fmt.Sprintf("%d/%d", e.Partition, e.Sequence))
	}
	return seqs, next
}

func TestQueryFlagsMapOntoEveryFilter(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	seedOrders(t, c)
	// Partition 0 holds 0/1 (NL placed), 0/2 (NL shipped), 0/3 (NL "42");
	// partition 1 holds 1/1 (FR), 1/2 (DE).
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"0/1", "1/1", "0/2", "1/2", "0/3"}},
		{[]string{"--type", "order_shipped"}, []string{"0/2"}},
		{[]string{"--partition", "1"}, []string{"1/1", "1/2"}},
		{[]string{"--partition", "0", "--partition", "1", "--type", "order_placed"}, []string{"0/1", "1/1", "1/2", "0/3"}},
		{[]string{"--meta", "corr=a"}, []string{"0/1", "0/2", "1/2"}},
		{[]string{"--field", "country=NL", "--type", "order_placed"}, []string{"0/1", "0/3"}},
		{[]string{"--field", "total=42"}, []string{"0/1", "0/2"}},
		{[]string{"--field", `total="42"`}, []string{"0/3"}},
		{[]string{"--field", "total=7.5"}, []string{"1/2"}},
		{[]string{"--field", "vip=true"}, []string{"0/1", "0/2"}},
		{[]string{"--field", "vip=null"}, []string{"0/3"}},
		{[]string{"--field", "customer.tier=gold"}, []string{"0/1"}},
		{[]string{"--after-seq", "1", "--until-seq", "2"}, []string{"0/2", "1/2"}},
		{[]string{"--order", "partition:desc", "--order", "sequence"}, []string{"1/1", "1/2", "0/1", "0/2", "0/3"}},
		{[]string{"--key", "nokey"}, nil},
	} {
		got, _ := queryIDs(t, c, tc.args...)
		require.Equal(t, tc.want, got, "query %v", tc.args)
	}

	c.fails(exitError, "unknown order field", "query", "orders", "--order", "colour")
}

func TestQueryTimeWindowAndCursorPaging(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	seedOrders(t, c)
	evs, _ := c.events()
	first, last := evs[0].Timestamp, evs[0].Timestamp
	for _, e := range evs {
		first, last = minTime(first, e.Timestamp), maxTime(last, e.Timestamp)
	}

	got, _ := queryIDs(t, c, "--from", first.Format(time.RFC3339Nano), "--to", last.Format(time.RFC3339Nano))
	require.Len(t, got, 5)
	got, _ = queryIDs(t, c, "--from", last.Add(time.Second).Format(time.RFC3339Nano))
	require.Empty(t, got)

	var all []string
	cursor := ""
	for range 10 {
		args := []string{"--limit", "2"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		seqs, next := queryIDs(t, c, args...)
		all = append(all, seqs...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"0/1", "1/1", "0/2", "1/2", "0/3"}, all, "pages never skip or repeat")

	out := c.ok("query", "orders", "--limit", "2")
	require.Regexp(t, `(?m)^next page: --cursor c1\.`, out)
	require.Regexp(t, `(?m)^PARTITION\s+SEQ\s+ID\s+TYPE\s+KEY\s+TIMESTAMP\s+PAYLOAD\s+METADATA$`, out)
	c.fails(exitError, "does not decode", "query", "orders", "--cursor", "garbage")
}

func TestQueryNeverChangesGroups(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	seedOrders(t, c)
	c.ok("create-group", "orders", "g")
	c.ok("query", "orders")
	var info groupInfoJSON
	c.jsonOK(&info, "info", "orders", "g")
	require.Equal(t, int64(5), info.Lag.Total)
	require.Equal(t, int64(0), info.Inflight)
}

func TestCreateGroupStartPositions(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders")
	c.okStdin("{}\n{}\n{}\n", "append", "orders")
	require.Contains(t, c.ok("create-group", "orders", "all"), "created group all on stream orders")
	c.ok("create-group", "orders", "new", "--start", "latest")
	c.ok("create-group", "orders", "after2", "--start", "2", "--max-attempts", "2")
	c.ok("create-group", "orders", "later", "--start", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	for group, want := range map[string]int64{"all": 3, "new": 0, "after2": 1, "later": 0} {
		var lag lagJSON
		c.jsonOK(&lag, "lag", "orders", group)
		require.Equal(t, want, lag.Total, "group %s", group)
	}
	c.fails(exitError, "already exists", "create-group", "orders", "all")
	c.fails(exitError, "beyond its high watermark", "create-group", "orders", "x", "--start", "9")
}

func TestGroupsListsLagAndHealth(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ordersWithGroup("billing", "{}\n{}\n")
	c.ok("create-group", "orders", "audit", "--start", "latest")
	out := c.ok("groups", "orders")
	require.Regexp(t, `(?m)^GROUP\s+LAG\s+INFLIGHT\s+AVAILABLE\s+DEAD\s+OLDEST PENDING$`, out)
	require.Regexp(t, `(?m)^audit\s+0\s+0\s+0\s+0\s+-$`, out)
	require.Regexp(t, `(?m)^billing\s+2\s+0\s+2\s+0\s+\d{4}-`, out)

	var groups []groupInfoJSON
	c.jsonOK(&groups, "groups", "orders")
	require.Len(t, groups, 2)
	require.Equal(t, "audit", groups[0].Group)
	require.Equal(t, int64(2), groups[1].Lag.Total)
	require.Nil(t, groups[0].OldestPending)
	c.fails(exitError, "stream not found", "groups", "nosuch")
}

func TestLagCountsLeasedEventsUntilAcked(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders", "--partitions", "2")
	c.okStdin("{}\n{}\n", "append", "orders", "--partition", "0")
	c.ok("append", "orders", "{}", "--partition", "1")
	c.ok("create-group", "orders", "g")

	cl := c.client()
	ls := fetchLeases(t, cl, "orders", "g", 10)
	require.Len(t, ls, 3)
	require.NoError(t, cl.Ack(context.Background(), ls[1])) // partition 0 seq 2: a hole below it

	out := c.ok("lag", "orders", "g")
	require.Regexp(t, `(?m)^PARTITION\s+FRONTIER\s+HIGH WATERMARK\s+LAG$`, out)
	require.Regexp(t, `(?m)^0\s+0\s+2\s+2$`, out)
	require.Regexp(t, `(?m)^1\s+0\s+1\s+1$`, out)
	require.Regexp(t, `(?m)^total\s+3$`, out)

	require.NoError(t, cl.AckBatch(context.Background(), []rheo.Lease{ls[0], ls[2]}))
	var lag lagJSON
	c.jsonOK(&lag, "lag", "orders", "g", "--partition", "0")
	require.Equal(t, lagJSON{Stream: "orders", Group: "g", Total: 0,
		Partitions: []partitionLagJSON{{Partition: 0, Frontier: 2, HighWatermark: 2, Lag: 0}}}, lag)
}

func TestInfoShowsInflightAndDeadLetters(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ordersWithGroup("g", "{}\n{}\n{}\n")
	cl := c.client()
	ls := fetchLeases(t, cl, "orders", "g", 2)
	require.NoError(t, cl.Reject(context.Background(), ls[0], "bad payload"))

	out := c.ok("info", "orders", "g")
	for _, re := range []string{`(?m)^stream\s+orders$`, `(?m)^group\s+g$`, `(?m)^lag\s+2$`, `(?m)^inflight\s+1$`,
		`(?m)^available\s+1$`, `(?m)^dead letters\s+1$`, `(?m)^oldest pending\s+\d{4}-`} {
		require.Regexp(t, re, out)
	}
	var info groupInfoJSON
	c.jsonOK(&info, "info", "orders", "g")
	require.Equal(t, int64(1), info.Inflight)
	require.Equal(t, int64(1), info.DeadLetters)
	require.NotNil(t, info.OldestPending)
}

func TestDeadLettersThenRedrive(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ordersWithGroup("g", "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n")
	cl := c.client()
	ctx := context.Background()
	ls := fetchLeases(t, cl, "orders", "g", 3)
	require.NoError(t, cl.Reject(ctx, ls[0], "unknown customer"))
	require.NoError(t, cl.Reject(ctx, ls[2], "bad total"))
	require.NoError(t, cl.Ack(ctx, ls[1]))

	out := c.ok("dead-letters", "orders", "g")
	require.Regexp(t, `(?m)^PARTITION\s+SEQ\s+EVENT ID\s+ATTEMPTS\s+DEAD-LETTERED\s+REASON$`, out)
	require.Regexp(t, `(?m)^0\s+1\s+`+ls[0].Event.ID+`\s+1\s+\S+\s+unknown customer$`, out)
	require.Regexp(t, `(?m)^0\s+3\s+`+ls[2].Event.ID+`\s+1\s+\S+\s+bad total$`, out)

	var dls []struct {
		EventID string    `json:"event_id"`
		Reason  string    `json:"reason"`
		Event   eventJSON `json:"event"`
	}
	c.jsonOK(&dls, "dead-letters", "orders", "g", "--after", ls[0].Event.ID, "--limit", "5")
	require.Len(t, dls, 1)
	require.Equal(t, "bad total", dls[0].Reason)
	require.JSONEq(t, `{"n":3}`, string(dls[0].Event.Payload))
	c.fails(exitError, "cursor not found", "dead-letters", "orders", "g", "--after", "nosuch")

	require.Contains(t, c.ok("redrive", "orders", "g", ls[2].Event.ID), "redrove 1 dead letters of group g")
	c.jsonOK(&dls, "dead-letters", "orders", "g")
	require.Len(t, dls, 1)
	var n struct {
		Redriven int     `json:"redriven"`
		Lag      lagJSON `json:"lag"`
	}
	c.jsonOK(&n, "redrive", "orders", "g")
	require.Equal(t, 1, n.Redriven)
	c.jsonOK(&dls, "dead-letters", "orders", "g")
	require.Empty(t, dls)

	again := fetchLeases(t, cl, "orders", "g", 3)
	require.Len(t, again, 2, "redriven events are delivered again")
	require.Equal(t, 1, again[0].Attempt, "attempts start over")
}

// consumeAll acks every event of the group.
func consumeAll(t *testing.T, cl *rheo.Client, stream, group string) {
	t.Helper()
	ctx := context.Background()
	for {
		ls, err := cl.Fetch(ctx, stream, group, rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		if len(ls) == 0 {
			return
		}
		require.NoError(t, cl.AckBatch(ctx, ls))
	}
}

func TestReplayEveryRange(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	seedOrders(t, c)
	c.ok("create-group", "orders", "g")
	c.ok("create-group", "orders", "other")
	cl := c.client()
	lag := func(group string) int64 {
		var l lagJSON
		c.jsonOK(&l, "lag", "orders", group)
		return l.Total
	}
	p1, _ := c.events("--partition", "1")
	firstP1 := p1[0]

	for _, tc := range []struct {
		args     []string
		want     int64 // lag afterwards
		reopened int
	}{
		{[]string{"--from-seq", "0"}, 5, 5},
		{[]string{"--from-seq", "1", "--partition", "0"}, 2, 2},
		{[]string{"--from-time", firstP1.Timestamp.Format(time.RFC3339Nano), "--partition", "1"}, 2, 2},
		{[]string{"--event", firstP1.ID}, 2, 1},
		{[]string{"--type", "order_shipped"}, 2, 1},
		{[]string{"--field", "country=NL", "--partition", "0"}, 3, 3},
	} {
		consumeAll(t, cl, "orders", "g")
		require.Zero(t, lag("g"))
		out := c.ok(append([]string{"replay", "orders", "g"}, tc.args...)...)
		require.Contains(t, out, fmt.Sprintf("replayed group g on stream orders: reopened %s; lag now %d", deliveries(tc.reopened), tc.want), "replay %v", tc.args)
		require.Equal(t, tc.want, lag("g"), "replay %v", tc.args)
		consumeAll(t, cl, "orders", "g")
		var res struct {
			Reopened int `json:"reopened"`
		}
		c.jsonOK(&res, append([]string{"replay", "orders", "g"}, tc.args...)...)
		require.Equal(t, tc.reopened, res.Reopened, "replay %v, JSON", tc.args)
	}
	require.Equal(t, int64(5), lag("other"), "replay never touches other groups")

	c.fails(exitUsage, "exactly one range", "replay", "orders", "g", "--from-seq", "0", "--event", firstP1.ID)
	c.fails(exitError, "no events in range", "replay", "orders", "g", "--type", "nosuch")
	c.fails(exitError, "is not in stream", "replay", "orders", "g", "--event", "nosuch")
}

func TestResetRefusesWithoutConfirm(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ordersWithGroup("g", "{}\n{}\n")
	consumeAll(t, c.client(), "orders", "g")

	r := c.fails(exitUsage, "rerun with --confirm", "reset", "orders", "g")
	require.Contains(t, r.err, "nothing was changed")
	var lag lagJSON
	c.jsonOK(&lag, "lag", "orders", "g")
	require.Equal(t, int64(0), lag.Total, "nothing was reset")

	require.Contains(t, c.ok("reset", "orders", "g", "--confirm"), "reset group g on stream orders: reopened 2 deliveries; lag now 2")
	consumeAll(t, c.client(), "orders", "g")
	require.Contains(t, c.ok("reset", "orders", "g", "--confirm", "--start", "1"), "reopened 1 delivery; lag now 1")
	require.Contains(t, c.ok("reset", "orders", "g", "--confirm", "--start", "latest"), "reopened 0 deliveries; lag now 0")
	c.fails(exitError, "group not found", "reset", "orders", "nosuch", "--confirm")
}

func TestTailFollowsNewEventsWithoutTouchingGroups(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders", "--partitions", "2")
	c.ok("create-group", "orders", "g")
	c.ok("append", "orders", `{"n":1}`, "--partition", "0")
	c.ok("append", "orders", `{"n":2}`, "--partition", "1")

	var out, errOut syncBuffer
	done := c.start(context.Background(), &out, &errOut, "tail", "orders", "--from-beginning",
		"--limit", "4", "--interval", "5ms", "--json")
	c.ok("append", "orders", `{"n":3}`, "--partition", "1")
	c.ok("append", "orders", `{"n":4}`, "--partition", "0")
	require.Equal(t, 0, c.exited(done, "tail did not print 4 events"), errOut.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4)
	seen := map[string]bool{}
	for _, l := range lines {
		var e eventJSON
		require.NoError(t, json.Unmarshal([]byte(l), &e))
		seen[string(e.Payload)] = true
	}
	require.Len(t, seen, 4)

	var info groupInfoJSON
	c.jsonOK(&info, "info", "orders", "g")
	require.Equal(t, int64(4), info.Lag.Total)
	require.Equal(t, int64(0), info.Inflight, "tail holds no lease")
}

func TestTailSkipsExistingEventsAndStopsOnCancel(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("create-stream", "orders")
	c.ok("append", "orders", `{"old":true}`)

	var out, errOut syncBuffer
	done := c.start(context.Background(), &out, &errOut, "tail", "orders", "--limit", "1", "--interval", "5ms")
	// Keep appending until tail, once started, sees one: it must be new.
	code := -1
	for i := 0; code < 0 && i < 10000; i++ {
		c.ok("append", "orders", fmt.Sprintf(`{"new":%d}`, i))
		select {
		case code = <-done:
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.Equal(t, 0, code, errOut.String())
	require.Regexp(t, `^\S+  p0 #\d+  \S+  type=- key=-  \{"new":\d+\}\n$`, out.String())

	// Interrupt a tail that is running (it has printed): it exits 0.
	var out2 syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done = c.start(ctx, &out2, &errOut, "tail", "orders", "--from-beginning", "--interval", "5ms")
	for i := 0; out2.String() == "" && i < 6000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	require.NotEmpty(t, out2.String(), "tail printed the existing events")
	cancel()
	require.Equal(t, 0, c.exited(done, "tail did not stop on cancel"), "an interrupted tail exits cleanly: %s", errOut.String())
	c.fails(exitError, "stream not found", "tail", "nosuch")
	c.fails(exitError, "invalid partition", "tail", "orders", "--partition", "3")
}

// benchReport is what `rheo bench --json` prints.
type benchReport struct {
	Settings benchSettings `json:"settings"`
	Results  []benchRate   `json:"results"`
}

func TestBenchReportsRatesAndSettings(t *testing.T) {
	t.Parallel()
	c := memoryCLI(t)
	var rep benchReport
	c.jsonOK(&rep, "bench", "--events", "300", "--batch", "50", "--fetch-limit", "40", "--consumers", "2", "--partitions", "3", "--groups", "2")
	require.Equal(t, benchSettings{DSN: "memtest:", Stream: rep.Settings.Stream, Events: 300, Batch: 50,
		Partitions: 3, FetchLimit: 40, Consumers: 2, Groups: 2}, rep.Settings)
	require.Len(t, rep.Results, 3)
	for i, phase := range []string{"append", "consume", "runtime"} {
		require.Equal(t, phase, rep.Results[i].Phase)
		require.Equal(t, 300, rep.Results[i].Events)
		require.Positive(t, rep.Results[i].EventsPerSec)
	}
	out := c.ok("bench", "--events", "100")
	require.Regexp(t, `(?m)^backend memtest:, stream bench-\w+: events 100, partitions 1, append batch 100, fetch limit 100, consumers 1, idle groups 0$`, out)
	require.Regexp(t, `(?m)^consume\s+Fetch\(Limit 100\)\+AckBatch x1\s+100\s+`, out)
	// The runtime runs with only Concurrency set: the default window.
	require.Regexp(t, `(?m)^runtime\s+Consumer \(Concurrency 1, default window ≤ 2000\)\s+100\s+`, out)
}

func TestFieldValuesAreJSONTyped(t *testing.T) {
	t.Parallel()
	m, err := parseFields([]string{"a=42", "b=true", "c=null", `d="7"`, "e=NL", "f=1.5", "g={\"x\":1}", "h=", "i=a=b"})
	require.NoError(t, err)
	require.Equal(t, json.Number("42"), m["a"])
	require.Equal(t, true, m["b"])
	require.Nil(t, m["c"])
	require.Contains(t, m, "c")
	require.Equal(t, "7", m["d"])
	require.Equal(t, "NL", m["e"])
	require.Equal(t, json.Number("1.5"), m["f"])
	require.Equal(t, `{"x":1}`, m["g"])
	require.Equal(t, "", m["h"])
	require.Equal(t, "a=b", m["i"])
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func TestBenchOnSQLiteFile(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var rep benchReport
	c.jsonOK(&rep, "bench", "--events", "200", "--batch", "20")
	require.Equal(t, c.dsn, rep.Settings.DSN)
	require.Contains(t, rep.Settings.Store, "synchronous=NORMAL", "the store's own settings are part of the report")
	require.Len(t, rep.Results, 3)
	for _, r := range rep.Results {
		require.Equal(t, 200, r.Events, r.Phase)
	}
	ctx := context.Background()
	cl := c.client()
	streams, err := cl.ListStreams(ctx)
	require.NoError(t, err)
	require.Empty(t, streams, "bench deletes its stream afterwards")

	out := c.ok("bench", "--events", "50", "--keep")
	require.Regexp(t, `(?m)^backend .*, stream bench-\w+ \(kept\): events 50,`, out)
	streams, err = cl.ListStreams(ctx)
	require.NoError(t, err)
	require.Len(t, streams, 1, "--keep leaves the stream")
	require.Regexp(t, `^bench-\w+$`, streams[0].Name)
}

func TestBenchWithoutDSNUsesATemporaryFile(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	a := newApp(strings.NewReader(""), &out, &errOut)
	a.getenv = func(string) string { return "" }
	code := a.run(context.Background(), []string{"bench", "--events", "50", "--json"})
	require.Equal(t, 0, code, errOut.String())
	var rep benchReport
	require.NoError(t, json.Unmarshal([]byte(out.String()), &rep))
	require.Regexp(t, `^sqlite:.*rheo-bench-\d+/bench\.db$`, rep.Settings.DSN)
	require.NoFileExists(t, "rheo.db", "bench never writes to the default store")
}

// memory: is a new, empty store in every run: the commands that work on
// what a store holds refuse it as a usage error, and demo and bench, which
// do everything in one run, take it.
func TestMemoryDSNOnlyForDemoAndBench(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"create-stream", "orders"},
		{"streams"},
		{"append", "orders", `{"n":1}`},
		{"lag", "orders", "g"},
		{"dashboard", "--addr", "127.0.0.1:0"},
	} {
		var out, errOut strings.Builder
		code := run(context.Background(), append([]string{"--dsn", "memory:"}, args...), strings.NewReader(""), &out, &errOut)
		require.Equal(t, exitUsage, code, "%s: %s", args[0], errOut.String())
		require.Contains(t, errOut.String(), "rheo: memory: is a new, empty store in every run of rheo, gone when it exits: 'rheo "+args[0]+"' needs a store that outlives it", args[0])
		require.Empty(t, out.String(), args[0])
	}
	// append refuses before it reads stdin (a terminal would wait for input).
	var out, errOut strings.Builder
	code := run(context.Background(), []string{"--dsn", "memory:", "append", "orders"}, failingReader{t}, &out, &errOut)
	require.Equal(t, exitUsage, code, errOut.String())
	out.Reset()
	errOut.Reset()
	code = run(context.Background(), []string{"--dsn", "memory:", "bench", "--events", "50", "--keep"}, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitUsage, code, errOut.String())
	require.Contains(t, errOut.String(), "--keep with memory: keeps nothing")
	out.Reset()
	errOut.Reset()
	code = run(context.Background(), []string{"--dsn", "memory:", "bench", "--events", "50"}, strings.NewReader(""), &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
}

// failingReader fails the test that reads it.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("stdin was read")
	return 0, io.EOF
}
