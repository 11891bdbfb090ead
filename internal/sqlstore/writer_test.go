package sqlstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// sqliteDialect is what a write transaction needs of a dialect.
type sqliteDialect struct{ Dialect }

func (sqliteDialect) Name() string               { return "sqlite" }
func (sqliteDialect) Rebind(q string) string     { return q }
func (sqliteDialect) Misconfigured(error) string { return "" }
func (sqliteDialect) CommitAmbiguous(error) bool { return false }
func (sqliteDialect) LockRows() string           { return "" }
func (sqliteDialect) MaxParams() int             { return 999 }

// TestPinnedWriterLeftInATransactionIsReplaced: when the pinned writer
// connection is inside a transaction that no write of the store began (as
// a context ending while the driver ran BEGIN can leave it), the write
// that finds out fails, and the next one runs on a fresh connection. The
// connection used to go back to the pool still inside the transaction, so
// every later write failed with "cannot start a transaction within a
// transaction".
func TestPinnedWriterLeftInATransactionIsReplaced(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "w.db")+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	_, err = db.ExecContext(ctx, "CREATE TABLE t (n INTEGER)")
	require.NoError(t, err)
	s := New(Config{Dialect: sqliteDialect{}, Write: db, SingleWriter: true})
	t.Cleanup(s.Release)
	insert := func(n int) error {
		return s.write(ctx, "insert", func(w *writeTx) error {
			_, err := w.exec(ctx, "INSERT INTO t VALUES (?)", n)
			return err
		})
	}
	require.NoError(t, insert(1))

	s.wmu.Lock()
	_, err = s.wconn.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = s.wconn.ExecContext(ctx, "INSERT INTO t VALUES (99)")
	require.NoError(t, err)
	s.wmu.Unlock()

	require.ErrorContains(t, insert(2), "within a transaction")
	require.NoError(t, insert(3), "the next write gets a fresh connection")
	require.NoError(t, insert(4))
	s.Release() // gives the pool its one connection back
	var got []int
	rows, err := db.QueryContext(ctx, "SELECT n FROM t ORDER BY n")
	require.NoError(t, err)
	for rows.Next() {
		var n int
		require.NoError(t, rows.Scan(&n))
		got = append(got, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{1, 3, 4}, got, "the stray transaction was rolled back")
}
