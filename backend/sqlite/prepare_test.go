package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// stmtStat is what SQLite counts for one prepared statement.
type stmtStat struct {
	sql             string
	runs, reprepare int32
}

// writerStatements lists the statements prepared on a backend's writer
// connection with SQLite's own counters (sqlite3_stmt_status), read through
// the driver's connection handle.
func writerStatements(t *testing.T, s *sqlstore.Store) []stmtStat {
	t.Helper()
	var out []stmtStat
	require.NoError(t, sqlstore.WithWriter(s, func(c *sql.Conn) error {
		return c.Raw(func(dc any) error {
			v := reflect.ValueOf(dc.(driver.Conn))
			if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
				return fmt.Errorf("driver connection %T is not a pointer to a struct", dc)
			}
			dbf, tlsf := v.Elem().FieldByName("db"), v.Elem().FieldByName("tls")
			if !dbf.IsValid() || !tlsf.IsValid() || dbf.Kind() != reflect.Uintptr || tlsf.Kind() != reflect.Pointer {
				return fmt.Errorf("driver connection %T has no db handle and TLS fields; has modernc.org/sqlite changed?", dc)
			}
			db, tls := uintptr(dbf.Uint()), (*libc.TLS)(unsafe.Pointer(tlsf.Pointer()))
			for st := sqlite3.Xsqlite3_next_stmt(tls, db, 0); st != 0; st = sqlite3.Xsqlite3_next_stmt(tls, db, st) {
				out = append(out, stmtStat{
					sql:       libc.GoString(sqlite3.Xsqlite3_sql(tls, st)),
					runs:      sqlite3.Xsqlite3_stmt_status(tls, st, sqlite3.SQLITE_STMTSTATUS_RUN, 0),
					reprepare: sqlite3.Xsqlite3_stmt_status(tls, st, sqlite3.SQLITE_STMTSTATUS_REPREPARE, 0),
				})
			}
			return nil
		})
	}))
	return out
}

// TestHotStatementsArePreparedOnce runs fetches and settles of every kind
// (acks, nacks now and later, expired leases, lag reads) over 8 and over
// 40 partitions (more than 29 of them then hold timed deliveries, which
// the fetch's poison sweep lists), and requires that no statement of the
// writer was prepared again as the partitions it reads took turns. SQLite
// prepares a statement again when a parameter its planner looked at
// changes; a partition compared as a bare parameter, in a statement
// ordered by sequence, was one (the reads of events and of spans were
// parsed and planned again about every other run).
func TestHotStatementsArePreparedOnce(t *testing.T) {
	for _, parts := range []int{8, 40} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			ctx := context.Background()
			b := open(t)
			clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			c := rheo.New(b, rheo.WithClock(clk))
			require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
			require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 3}))
			ms := make([]rheo.Message, 8000)
			for i := range ms {
				ms[i] = rheo.Message{Key: fmt.Sprint(i), Payload: []byte(`{"n":1}`)}
			}
			_, err := c.AppendBatch(ctx, "s", ms)
			require.NoError(t, err)

			for range 150 {
				ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 50, LeaseDuration: time.Second})
				require.NoError(t, err)
				var acks []rheo.Lease
				for j, l := range ls {
					switch j % 10 {
					case 0:
						require.NoError(t, c.Nack(ctx, l, "now"))
					case 1:
						require.NoError(t, c.Nack(ctx, l, "later", rheo.Delay(time.Second)))
					case 2: // left to expire
					default:
						acks = append(acks, l)
					}
				}
				require.NoError(t, c.AckBatch(ctx, acks))
				_, err = c.Lag(ctx, "s", "g")
				require.NoError(t, err)
				clk.Advance(700 * time.Millisecond)
			}

			stats := writerStatements(t, b.Store)
			hot := 0
			for _, st := range stats {
				if st.runs < 100 {
					continue
				}
				hot++
				// SQLite may prepare a statement once more on its first run.
				require.LessOrEqual(t, st.reprepare, int32(1), "statement run %d times was prepared again %d times:\n%s",
					st.runs, st.reprepare, strings.TrimSpace(st.sql))
			}
			require.GreaterOrEqual(t, hot, 5, "statements run at least 100 times: %d of %d", hot, len(stats))
		})
	}
}
