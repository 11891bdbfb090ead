package sqlstore

import (
	"strings"
)

// Dialect is everything that differs between the SQL databases rheo runs on.
// Shared code writes SQL in the subset SQLite and PostgreSQL agree on
// (ON CONFLICT upserts, RETURNING, row values, CTEs, window functions) with
// `?` placeholders, and asks the dialect for the rest.
type Dialect interface {
	// Name names the dialect in error messages ("sqlite", "postgres").
	Name() string
	// Rebind rewrites a query written with `?` placeholders into the
	// database's own (`$1, $2, …` on PostgreSQL). Shared SQL never contains
	// a literal question mark outside placeholders.
	Rebind(query string) string
	// Types maps the schema's type tokens ({IDPK}, {TEXT}, {JSON},
	// {TABLEOPTS}) onto this database's DDL, {LEASES_BY_ATTEMPT} onto
	// the statement of schema version 6 (SQLite's index of leases by
	// attempt, which its fetch's poison sweep reads; "" for a database
	// whose backend fetches its own way) and {RETRIED_LEASES} onto that of
	// version 7 (PostgreSQL's index of leases past their first attempt,
	// for its own fetch's sweep; "" elsewhere).
	Types() map[string]string
	// MaxParams is how many bind parameters one statement may carry.
	MaxParams() int

	// LockRows is appended to a SELECT that reads rows the transaction
	// will update ("" on SQLite, whose write transactions already hold the
	// database's single write lock; " FOR UPDATE" on PostgreSQL).
	LockRows() string
	// TextOrder is appended to a text column in ORDER BY so that strings
	// sort bytewise, like Go's strings.Compare ("" on SQLite, whose default
	// collation is bytewise; ` COLLATE "C"` on PostgreSQL).
	TextOrder() string
	// ExplodeSpans is the statement that turns the spans of a group in some
	// partitions into the delivery rows they stand for and deletes them
	// (arguments: group id, stream id, the partitions as an integer array,
	// and a time in microseconds: the spans whose lease expired by then,
	// and those whose members are all settled), or "" for a store that
	// writes no spans (see spans.go).
	ExplodeSpans() string
	// InsertMany is the verb of a multi-row INSERT that the write
	// transaction rolls back whole when it fails: "INSERT OR FAIL" on
	// SQLite (a failing row ends the statement without undoing the rows
	// before it, so SQLite keeps no statement journal of the pages it
	// changes), "INSERT" elsewhere.
	InsertMany() string
	// MigrationLock is a statement run first in the migration transaction
	// so that concurrent Migrate calls serialise ("" when the write
	// transaction already does).
	MigrationLock() string

	// MetadataEq writes a predicate: the metadata JSON object in column col
	// maps key to the string val. key is arbitrary text and must reach the
	// database only as a bind parameter.
	MetadataEq(b *Builder, col, key, val string)
	// PayloadEq writes a predicate: the payload JSON in column col holds, at
	// the nested object path, a JSON value equal to v (string, bool, nil for
	// JSON null, int64 or float64; numbers compare numerically, 2 == 2.0,
	// and never equal strings or booleans).
	PayloadEq(b *Builder, col string, path []string, v any)

	// IsUniqueViolation reports a unique or primary key constraint failure.
	IsUniqueViolation(err error) bool
	// Misconfigured returns what to fix when err is one no retry can cure
	// (a missing rheo table: the store was never migrated; a refused
	// login; a missing database), and "" otherwise.
	Misconfigured(err error) string
	// CommitAmbiguous reports whether a failed COMMIT may nevertheless have
	// committed (a connection lost mid-commit). SQLite never is.
	CommitAmbiguous(err error) bool
}

// Builder accumulates a statement and its arguments, always with `?`
// placeholders (see Dialect.Rebind).
type Builder struct {
	sb   strings.Builder
	args []any
}

// S appends SQL text.
func (b *Builder) S(sql string) *Builder {
	b.sb.WriteString(sql)
	return b
}

// Arg appends a placeholder bound to v.
func (b *Builder) Arg(v any) *Builder {
	b.sb.WriteByte('?')
	b.args = append(b.args, v)
	return b
}

// PartParam is the placeholder of a partition compared with a part
// column: written as a cast, so that SQLite's planner does not look at its
// value. A bare parameter in a statement that also orders by sequence made
// SQLite prepare the statement again whenever the partition it was bound
// to changed (about every other read of events or spans, partitions taking
// turns).
const PartParam = "CAST(? AS INTEGER)"

// Part appends the placeholder of partition p, as PartParam.
func (b *Builder) Part(p int) *Builder {
	b.sb.WriteString(PartParam)
	b.args = append(b.args, p)
	return b
}

// List appends "?, ?, …" bound to vs.
func List[T any](b *Builder, vs []T) *Builder {
	for i, v := range vs {
		if i > 0 {
			b.sb.WriteString(", ")
		}
		b.Arg(v)
	}
	return b
}

// SQL returns the statement text.
func (b *Builder) SQL() string { return b.sb.String() }

// Args returns the bound arguments.
func (b *Builder) Args() []any { return b.args }

// Placeholders returns "?, ?, …" (n of them) for statements built by hand.
func Placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// DollarRebind rewrites `?` placeholders as `$1, $2, …`: the Rebind of
// PostgreSQL dialects.
func DollarRebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var sb strings.Builder
	sb.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			sb.WriteByte('$')
			sb.WriteString(itoa(n))
			continue
		}
		sb.WriteByte(q[i])
	}
	return sb.String()
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}
