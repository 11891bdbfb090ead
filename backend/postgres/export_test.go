package postgres

import (
	"context"
	"slices"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// AppendSQLForTest exposes the append statement to the package's tests.
func (b *Backend) AppendSQLForTest() string { return b.appendSQL }

// SettleSQLForTest exposes the settle statement to the package's tests.
func (b *Backend) SettleSQLForTest() string { return b.settleSQL }

// FetchGUCsForTest and SettleGUCsForTest expose the settings the fetch and
// settle transactions run with.
const (
	FetchGUCsForTest  = setFetchGUCs
	SettleGUCsForTest = setSettleGUCs
)

// ExplodeSQLForTest exposes the statement a fetch runs before the claim.
func (b *Backend) ExplodeSQLForTest() string { return b.explodeFetch }

// FetchSQLForTest exposes the fetch statement to the package's tests.
func (b *Backend) FetchSQLForTest() string { return b.fetchSQL }

// FreshFetchSQLForTest exposes the fetch statement of a group with
// nothing due (its arguments are the first ten of FetchSQLForTest's).
func (b *Backend) FreshFetchSQLForTest() string { return b.freshFetch }

// LockCursorsSQLForTest exposes the statement a fetch runs before
// FreshFetchSQLForTest (its arguments are the group's and stream's IDs,
// the partitions and the time).
func (b *Backend) LockCursorsSQLForTest() string { return b.lockCursors }

// DueForTest tells whether the group's next fetch in this process goes
// straight to the statement that claims due deliveries.
func (b *Backend) DueForTest(ctx context.Context, stream, group string) (bool, error) {
	g, err := b.group(ctx, stream, group)
	if err != nil {
		return false, err
	}
	b.rrMu.Lock()
	defer b.rrMu.Unlock()
	return b.due[g.id], nil
}

// QuerySQLForTest compiles q on the stream with id streamID as Query runs it.
func (b *Backend) QuerySQLForTest(streamID int64, q rheo.QuerySpec) (string, []any) {
	d := dialect{q: b.q}
	bl := sqlstore.BuildQuery(d, streamID, q)
	return d.Rebind(bl.SQL()), bl.Args()
}

// MemberIDSQLForTest is the SQL that computes the lease ID of the span
// member whose token and sequence are the two parameters.
func MemberIDSQLForTest() string {
	return memberIDs("SELECT {MEMBER:t.tok:t.seq} FROM (SELECT $1::text AS tok, $2::bigint AS seq) t")
}

// WireMaxPrepared is how many append statements a connection keeps
// prepared.
const WireMaxPrepared = wireMaxPrepared

// SetAppendOIDsForTest changes the parameter types the append's encoding
// declares, through edit on a copy, until the returned function restores
// them.
func SetAppendOIDsForTest(edit func([]uint32)) (restore func()) {
	old := appendFastOIDs
	appendFastOIDs = slices.Clone(old)
	edit(appendFastOIDs)
	return func() { appendFastOIDs = old }
}

// SetOtherReceiptSQLForTest replaces the statement that tells a stale
// lease from a receipt mismatch (a statement that fails, say).
func (b *Backend) SetOtherReceiptSQLForTest(q string) { b.otherReceiptSQL = q }

// LagSQLForTest is the statement Lag runs (arguments: the group's id and
// its stream's).
func (b *Backend) LagSQLForTest() string { return b.sqlf(lagSQL) }

// LagPartsSQLForTest is the statement Lag runs for given partitions
// (arguments: the group's id, its stream's and the partitions).
func (b *Backend) LagPartsSQLForTest() string { return b.sqlf(lagPartsSQL) }
