package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func TestDeleteGroupNeedsConfirm(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s")
	c.ok("create-group", "s", "g")
	c.fails(exitUsage, "rerun with --confirm", "delete-group", "s", "g")
	require.Contains(t, c.ok("groups", "s"), "g")
	out := c.ok("delete-group", "s", "g", "--confirm")
	require.Contains(t, out, "deleted group g of stream s")
	require.NotContains(t, c.ok("groups", "s"), "g ")
	c.fails(exitError, "group not found", "delete-group", "s", "g", "--confirm")
}

func TestDeleteStreamNeedsConfirm(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s")
	c.ok("append", "s", `{"a":1}`)
	c.fails(exitUsage, "rerun with --confirm", "delete-stream", "s")
	require.Contains(t, c.ok("streams"), "s")
	c.ok("delete-stream", "s", "--confirm")
	require.NotContains(t, c.ok("streams"), "s ")
	c.fails(exitError, "stream not found", "delete-stream", "s", "--confirm")
}

func TestTrimAndStreamsShowCountsAndRetention(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s", "--max-events", "2")
	c.ok("create-group", "s", "g")
	for range 5 {
		c.ok("append", "s", `{"a":1}`)
	}
	var streams []map[string]any
	require.NoError(t, json.Unmarshal([]byte(c.ok("streams", "--json")), &streams))
	require.Len(t, streams, 1)
	require.Equal(t, float64(5), streams[0]["events"])
	require.Equal(t, "max-events=2", streams[0]["retention"])

	// The group has not consumed anything: it holds the trim back.
	require.Contains(t, c.ok("info", "s", "g"), "held back by this group")
	out := c.ok("trim", "s")
	require.Contains(t, out, "removed 0 events")
	require.Contains(t, out, "held back by group g")
	c.fails(exitUsage, "--force --confirm", "trim", "s", "--force")
	c.fails(exitUsage, "--max-events 0", "trim", "s", "--max-events", "0")
	var rep trimJSON
	require.NoError(t, json.Unmarshal([]byte(c.ok("trim", "s", "--force", "--confirm", "--json")), &rep))
	require.Equal(t, int64(3), rep.Removed)
	require.Equal(t, int64(3), rep.Skipped)
	require.Contains(t, c.ok("streams"), "max-events=2")
	require.NoError(t, json.Unmarshal([]byte(c.ok("streams", "--json")), &streams))
	require.Equal(t, float64(2), streams[0]["events"])
	require.Equal(t, float64(3), streams[0]["trimmed"])
	var info groupInfoJSON
	require.NoError(t, json.Unmarshal([]byte(c.ok("info", "s", "g", "--json")), &info))
	require.Equal(t, int64(3), info.Skipped)
	require.False(t, info.HoldsRetention)

	c.ok("set-retention", "s", "--none")
	c.fails(exitError, "no retention policy", "trim", "s")
	c.fails(exitUsage, "set-retention needs", "set-retention", "s")
}

func TestGetShowsEventAndGroupStates(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s")
	c.ok("create-group", "s", "done")
	c.ok("create-group", "s", "waiting")
	c.ok("append", "s", "--id", "e1", `{"a":1}`)
	cl := c.client()
	ctx := context.Background()
	ls, err := cl.Fetch(ctx, "s", "done", rheo.FetchOptions{})
	require.NoError(t, err)
	require.NoError(t, cl.Ack(ctx, ls[0]))
	require.NoError(t, cl.Close())

	var got struct {
		Event  eventJSON           `json:"event"`
		Groups []deliveryStateJSON `json:"groups"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("get", "s", "e1", "--json")), &got))
	require.Equal(t, "e1", got.Event.ID)
	require.Equal(t, []deliveryStateJSON{{"done", "done", 1}, {"waiting", "pending", 0}}, got.Groups)
	require.Contains(t, c.ok("get", "s", "e1"), "waiting")
	c.fails(exitError, `event "nope" is not in stream "s"`, "get", "s", "nope")
}

func TestVersionAndCompletion(t *testing.T) {
	c := newCLI(t)
	require.Regexp(t, `^rheo \S+\n$`, c.ok("version"))
	require.Regexp(t, `^rheo \S+\n$`, c.ok("--version"))
	for _, sh := range []string{"bash", "zsh", "fish"} {
		require.Contains(t, c.ok("completion", sh), "rheo", sh)
	}
	c.fails(exitUsage, "invalid argument", "completion", "powershell")
}

func TestIfNotExists(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s", "--partitions", "2")
	c.fails(exitError, "already exists", "create-stream", "s", "--partitions", "2")
	require.Contains(t, c.ok("create-stream", "s", "--partitions", "2", "--if-not-exists"), "already exists")
	c.fails(exitError, "exists with 2 partitions", "create-stream", "s", "--partitions", "3", "--if-not-exists")
	c.ok("create-group", "s", "g")
	c.fails(exitError, "already exists", "create-group", "s", "g")
	require.Contains(t, c.ok("create-group", "s", "g", "--if-not-exists"), "already exists")
	require.Contains(t, c.ok("create-group", "s", "g", "--max-attempts", "5", "--if-not-exists"), "already exists")
	c.fails(exitError, "exists with max attempts 5, not 3", "create-group", "s", "g", "--max-attempts", "3", "--if-not-exists")
	c.ok("create-group", "s", "g3", "--max-attempts", "3")
	require.Contains(t, c.ok("create-group", "s", "g3", "--max-attempts", "3", "--if-not-exists"), "already exists")
	c.fails(exitError, "exists with max attempts 3, not 5", "create-group", "s", "g3", "--if-not-exists")
}

func TestExplicitZerosAndEmptyDSNAreRefused(t *testing.T) {
	c := newCLI(t)
	c.fails(exitUsage, "--partitions 0", "create-stream", "s", "--partitions", "0")
	c.ok("create-stream", "s")
	c.fails(exitUsage, "--max-attempts 0", "create-group", "s", "g", "--max-attempts", "0")
	var out, errOut strings.Builder
	code := c.app("", &out, &errOut).run(context.Background(), []string{"--dsn", "", "streams"})
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut.String(), "rheo: --dsn is empty")
}

// Only create-stream, migrate, demo and bench may create a sqlite: file:
// every other command works on a stream or group the store must already
// hold, so a path that does not exist (a typo, say) is an error, and no
// new empty database is left behind.
func TestReadOnlyCommandsNeverCreateAStore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing.db")
	c := &cli{t: t, dsn: "sqlite:" + path}
	for _, args := range [][]string{{"streams"}, {"groups", "s"}, {"lag", "s", "g"}, {"get", "s", "e"},
		{"query", "s"}, {"info", "s", "g"}, {"dead-letters", "s", "g"}, {"delete-stream", "s", "--confirm"}, {"trim", "s"},
		{"create-group", "s", "g"}, {"append", "s", `{"a":1}`}, {"redrive", "s", "g"}, {"replay", "s", "g", "--from-seq", "0"},
		{"reset", "s", "g", "--confirm"}, {"delete-group", "s", "g", "--confirm"}, {"set-retention", "s", "--max-events", "5"},
		{"tail", "s"}, {"metrics", "--addr", "127.0.0.1:0"}, {"dashboard", "--addr", "127.0.0.1:0"}} {
		r := c.run(args...)
		require.Equal(t, exitError, r.code, "%v: %s", args, r.err)
		require.Contains(t, r.err, "does not exist", "%v", args)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "%v created the store", args)
	}
}

func TestDemoRefusesRHEODSN(t *testing.T) {
	var out, errOut strings.Builder
	a := newApp(strings.NewReader(""), &out, &errOut)
	a.getenv = func(k string) string {
		if k == "RHEO_DSN" {
			return "postgres://u:secret@db/prod"
		}
		return ""
	}
	code := a.run(context.Background(), []string{"demo"})
	require.Equal(t, exitError, code)
	require.Contains(t, errOut.String(), "does not write into the store RHEO_DSN names")
	require.NotContains(t, errOut.String(), "secret")
	require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one rheo: line")
}

func TestAppendEnvelopesFromStdin(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "orders", "--partitions", "3")
	file := `{"id":"a","type":"t1","key":"k","metadata":{"m":"1"},"payload":{"n":1}}
{"n":2}

{"id":"c","partition":2,"payload":{"n":3}}
`
	var evs []eventJSON
	require.NoError(t, json.Unmarshal([]byte(c.okStdin(file, "append", "orders", "--type", "flag", "--json")), &evs))
	require.Len(t, evs, 3)
	require.Equal(t, "a", evs[0].ID)
	require.Equal(t, "t1", evs[0].Type, "the envelope wins over --type")
	require.Equal(t, map[string]string{"m": "1"}, evs[0].Metadata)
	require.JSONEq(t, `{"n":1}`, string(evs[0].Payload))
	require.Equal(t, "flag", evs[1].Type, "a bare payload takes the flags")
	require.JSONEq(t, `{"n":2}`, string(evs[1].Payload))
	require.Equal(t, 2, evs[2].Partition)

	// Re-running the file appends nothing new for the lines with IDs.
	c.okStdin(file, "append", "orders")
	all, _ := c.events()
	require.Len(t, all, 4, "only the line without an ID was appended again")
}

func TestAppendValidatesEveryLineFirst(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "orders", "--partitions", "2")
	for _, tc := range []struct{ file, want string }{
		{"{\"n\":1}\n{\"id\":\"x\",\"partition\":5,\"payload\":{}}\n", "stdin line 2: invalid partition"},
		{"{\"n\":1}\n[1,2]\n", "stdin line 2"},
		{"{\"id\":\"d\",\"payload\":{}}\n{\"id\":\"d\",\"payload\":{}}\n", `stdin line 2: event ID "d" already given on line 1`},
		{"{\"n\":1}\n{\"id\":\"" + strings.Repeat("x", 300) + "\",\"payload\":{}}\n", "stdin line 2"},
		{"{\"n\":1}\nnot json\n", "stdin line 2 is not valid JSON"},
	} {
		r := c.failsStdin(tc.file, exitError, tc.want, "append", "orders")
		require.Equal(t, 1, strings.Count(r.err, "\n"), "one rheo: line: %s", r.err)
	}
	all, _ := c.events()
	require.Empty(t, all, "nothing is written when any line is bad")
	c.fails(exitUsage, "payload argument is empty", "append", "orders", "")
}

func TestRedriveUnknownIDsFails(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s")
	c.ok("create-group", "s", "g", "--max-attempts", "1")
	c.ok("append", "s", "--id", "bad", `{}`)
	c.ok("append", "s", "--id", "good", `{}`)
	cl := c.client()
	ctx := context.Background()
	ls, err := cl.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 2})
	require.NoError(t, err)
	require.NoError(t, cl.Reject(ctx, ls[0], "poison"))
	require.NoError(t, cl.Ack(ctx, ls[1]))
	require.NoError(t, cl.Close())

	c.fails(exitError, `not dead letters of group "g": good, nope; nothing was redriven`, "redrive", "s", "g", "bad", "good", "nope")
	require.Contains(t, c.ok("dead-letters", "s", "g"), "bad")
	require.Contains(t, c.ok("redrive", "s", "g", "bad"), "redrove 1 dead letters of group g; lag now 2")
}

// Input create-stream refuses is refused before a store is opened: no
// sqlite: file appears, and an out-of-range flag is a usage error.
func TestCreateStreamChecksBeforeOpening(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	c := &cli{t: t, dsn: "sqlite:" + path}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"create-stream", ""}, exitError, "stream name is empty"},
		{[]string{"create-stream", strings.Repeat("x", 300)}, exitError, "bytes (max"},
		{[]string{"create-stream", "a\x01"}, exitError, "control character"},
		{[]string{"create-stream", "x", "--partitions", "1025"}, exitUsage, "--partitions 1025: want 1 to 1024"},
		{[]string{"create-stream", "x", "--max-age", "1ns"}, exitUsage, "--max-age 1ns: want a duration of 1ms or more"},
	} {
		args := tc.args
		r := c.run(args...)
		require.Equal(t, tc.code, r.code, "%q: %s", args, r.err)
		require.Contains(t, r.err, tc.msg, "%q", args)
		_, err := os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "%q created the store", args)
	}
	c.ok("create-stream", "x")
	_, err := os.Stat(path)
	require.NoError(t, err)
}

// Flag values out of range are usage errors (exit 2), and a missing stream
// or group, or one that exists already, says what to run.
func TestOutOfRangeFlagsAndHints(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s")
	c.ok("create-group", "s", "g")
	for _, args := range [][]string{
		{"query", "s", "--limit", "0"}, {"query", "s", "--limit", "10001"}, {"query", "s", "--limit", "-1"},
		{"dead-letters", "s", "g", "--limit", "0"}, {"dead-letters", "s", "g", "--limit", "20000"},
		{"replay", "s", "g", "--from-seq", "-1"},
		{"create-group", "s", "g2", "--start", "-1"}, {"reset", "s", "g", "--start", "-1", "--confirm"},
		{"set-retention", "s", "--max-age", "1ns"},
	} {
		r := c.run(args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.err)
	}
	for args, hint := range map[string]string{
		"info nope g":      "rheo create-stream creates one",
		"info s nope":      "rheo create-group creates one",
		"create-stream s":  "with --if-not-exists one with the same settings is success",
		"create-group s g": "with --if-not-exists one with the same settings is success",
		"trim s":           "give --max-age, --max-events or --interest, or store a policy with rheo set-retention",
	} {
		r := c.run(strings.Fields(args)...)
		require.Equal(t, exitError, r.code, "%s: %s", args, r.err)
		require.Contains(t, r.err, hint, args)
	}
}
