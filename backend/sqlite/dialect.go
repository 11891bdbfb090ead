package sqlite

import (
	"errors"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rheo-go/rheo/internal/sqlstore"
)

// dialect is SQLite's side of the shared SQL layer.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

func (dialect) Name() string               { return "sqlite" }
func (dialect) Rebind(q string) string     { return q }
func (dialect) MaxParams() int             { return 32766 }
func (dialect) LockRows() string           { return "" }
func (dialect) TextOrder() string          { return "" }
func (dialect) MigrationLock() string      { return "" }
func (dialect) ExplodeSpans() string       { return "" } // the shared layer explodes SQLite's spans itself
func (dialect) CommitAmbiguous(error) bool { return false }

func (dialect) Types() map[string]string {
	return map[string]string{
		"{IDPK}": "INTEGER PRIMARY KEY",
		"{TEXT}": "TEXT",
		// JSON is kept as the text the facade compacted, so it comes back
		// byte-identical; the JSON functions parse it on demand.
		"{JSON}":      "TEXT",
		"{TABLEOPTS}": "",
		// Schema version 6: the leases at a group's attempt limit.
		"{LEASES_BY_ATTEMPT}": "CREATE INDEX IF NOT EXISTS rheo_deliveries_attempts ON rheo_deliveries (grp_id, part, attempt) WHERE status = 1",
		// Schema version 7 is PostgreSQL's: version 6's index serves here.
		"{RETRIED_LEASES}": "",
	}
}

// jsonPath quotes every segment, so keys with dots, dashes or spaces
// address one member. It fails for a segment holding a double quote, which
// SQLite's path syntax cannot escape.
func jsonPath(segs []string) (string, bool) {
	var b strings.Builder
	b.WriteByte('$')
	for _, s := range segs {
		if strings.ContainsAny(s, `"\`) {
			return "", false
		}
		b.WriteString(`."`)
		b.WriteString(s)
		b.WriteByte('"')
	}
	return b.String(), true
}

func (dialect) MetadataEq(b *sqlstore.Builder, col, key, val string) {
	if path, ok := jsonPath([]string{key}); ok {
		b.S("json_extract(" + col + ", ").Arg(path).S(") = ").Arg(val)
		return
	}
	b.S("EXISTS (SELECT 1 FROM json_each(" + col + ") m WHERE m.key = ").Arg(key).S(" AND m.value = ").Arg(val).S(")")
}

func (dialect) PayloadEq(b *sqlstore.Builder, col string, path []string, v any) {
	// The facade only lets letters, digits, '_' and '-' into payload paths.
	p, _ := jsonPath(path)
	typ := func() *sqlstore.Builder { return b.S("json_type(" + col + ", ").Arg(p).S(")") }
	switch x := v.(type) {
	case nil:
		typ().S(" = 'null'")
	case bool:
		if x {
			typ().S(" = 'true'")
		} else {
			typ().S(" = 'false'")
		}
	case string:
		b.S("(")
		typ().S(" = 'text' AND json_extract(" + col + ", ").Arg(p).S(") = ").Arg(x).S(")")
	default: // int64 or float64: SQLite compares 2 and 2.0 as equal
		b.S("(")
		typ().S(" IN ('integer', 'real') AND json_extract(" + col + ", ").Arg(p).S(") = ").Arg(x).S(")")
	}
}

// Misconfigured names the fix for SQLite's "no such table" on one of
// rheo's tables.
func (dialect) Misconfigured(err error) string {
	if err != nil && strings.Contains(err.Error(), "no such table: rheo_") {
		return migrateHint
	}
	return ""
}

const migrateHint = "the store is not migrated: run `rheo migrate --dsn DSN` or Client.Migrate"

func (dialect) IsUniqueViolation(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return e.Code()&0xff == sqlite3.SQLITE_CONSTRAINT && strings.Contains(e.Error(), "UNIQUE")
}
