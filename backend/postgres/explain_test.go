package postgres_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

func TestExplainScratch(t *testing.T) {
	if os.Getenv("RHEO_EXPLAIN") == "" {
		t.Skip()
	}
	be := newBackend(t)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	msgs := make([]rheo.Message, 100)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "bench", Key: strconv.Itoa(i), Payload: []byte(`{"n":1,"name":"x"}`)}
	}
	if os.Getenv("RHEO_DROP") != "" {
		_, err := be.Pool().Exec(ctx, "DROP INDEX "+be.Schema()+"."+os.Getenv("RHEO_DROP"))
		require.NoError(t, err)
	}
	for range 20 {
		_, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	st := time.Now()
	for range 100 {
		_, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	t.Logf("append 100x100: %v", time.Since(st))
	ids := make([]string, 100)
	parts := make([]int32, 100)
	types := make([]string, 100)
	keys := make([]string, 100)
	ts := make([]int64, 100)
	payloads := make([]string, 100)
	metas := make([]*string, 100)
	for i := range ids {
		ids[i] = "x" + strconv.Itoa(i)
		parts[i] = int32(i % 4)
		types[i] = "t"
		payloads[i] = `{"n":1}`
	}
	_, _, _ = metas, keys, ts
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	st = time.Now()
	n := 0
	var tf, ta time.Duration
	for n < 10000 {
		t0 := time.Now()
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		t1 := time.Now()
		n += len(ls)
		require.NoError(t, c.AckBatch(ctx, ls))
		tf += t1.Sub(t0)
		ta += time.Since(t1)
	}
	t.Logf("fetch %v ack %v", tf, ta)
	t.Logf("consume 10000: %v", time.Since(st))
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	var gid int64
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT id FROM "+be.Schema()+".rheo_groups").Scan(&gid))
	lids := make([]string, 100)
	for i := range lids {
		lids[i] = "00000000-0000-0000-0000-000000000000"
	}
	now := time.Now().UnixMicro()
	explain(t, be, be.FetchSQLForTest(), gid, int64(1), []int32{0, 1, 2, 3}, 100, now, now+30000000, "c", lids, 5, int32(0), "r")
	parts2 := make([]int32, len(ls))
	seqs := make([]int64, len(ls))
	l2 := make([]string, len(ls))
	e2 := make([]string, len(ls))
	kinds := make([]int32, len(ls))
	reasons := make([]string, len(ls))
	avail := make([]int64, len(ls))
	for i, l := range ls {
		parts2[i], seqs[i], l2[i], e2[i], kinds[i] = int32(l.Event.Partition), l.Event.Sequence, l.ID, l.Event.ID, 1
	}
	explain(t, be, be.SettleSQLForTest(), gid, now, parts2, seqs, l2, e2, kinds, reasons, avail, 5, "chan", "s")
}

func explain(t *testing.T, be *postgres.Backend, q string, args ...any) {
	rows, err := be.Pool().Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		t.Log(line)
	}
	require.NoError(t, rows.Err())
}
