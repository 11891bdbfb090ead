package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// hostProbe is what the peers' rates depend on besides the code under
// test, measured at the start and at the end of a run so that runs on
// different days (the host is a virtual machine whose speed varies) can be
// told apart: one core's speed, a round trip to each server, and a SQLite
// commit. A peer that waits for a round trip per message (watermill-redisstream's
// subscriber) or commits once per row (the one-row SQLite queue) follows
// the round trip or the commit; rheo, which batches, follows the CPU. So
// a ratio against such a peer moves with the host as well as with the code.
type hostProbe struct {
	sha256MBps   float64       // SHA-256 over 32 MiB on one core
	redisRTT     time.Duration // median PING
	pgRTT        time.Duration // median SELECT 1
	sqliteCommit time.Duration // median one-row INSERT, one transaction each (WAL, synchronous NORMAL)
}

const probeRounds = 500

func probeHost(ctx context.Context, e *env) (hostProbe, error) {
	var h hostProbe
	buf := make([]byte, 32<<20)
	start := time.Now()
	sha256.Sum256(buf)
	h.sha256MBps = float64(len(buf)) / (1 << 20) / time.Since(start).Seconds()

	var err error
	if h.redisRTT, err = medianOf(func() error { return e.rdb.Ping(ctx).Err() }); err != nil {
		return h, fmt.Errorf("Redis PING: %w", err)
	}
	if h.pgRTT, err = medianOf(func() error {
		var one int
		return e.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
	}); err != nil {
		return h, fmt.Errorf("PostgreSQL SELECT 1: %w", err)
	}
	db, cleanup, err := openSQLite(e, false)
	if err != nil {
		return h, err
	}
	defer cleanup()
	i := 0
	if h.sqliteCommit, err = medianOf(func() error {
		i++
		_, err := db.ExecContext(ctx, "INSERT INTO q (eid, payload) VALUES (?, ?)", strconv.Itoa(i), payloadString(i))
		return err
	}); err != nil {
		return h, fmt.Errorf("SQLite commit: %w", err)
	}
	return h, nil
}

// medianOf times probeRounds calls of f and returns the median.
func medianOf(f func() error) (time.Duration, error) {
	ts := make([]time.Duration, probeRounds)
	for i := range ts {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ts[i] = time.Since(start)
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

func (h hostProbe) String() string {
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + " µs" }
	return fmt.Sprintf("SHA-256 %.0f MB/s on one core; round trip Redis %s, PostgreSQL %s; SQLite commit %s",
		h.sha256MBps, us(h.redisRTT), us(h.pgRTT), us(h.sqliteCommit))
}
