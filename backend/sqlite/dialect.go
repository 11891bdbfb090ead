package sqlite

import (
	"database/sql/driver"
	"errors"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rheo-go/rheo/internal/match"
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
func (dialect) InsertMany() string         { return "INSERT OR FAIL" }
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
	default: // int64 or float64
		// json_extract reads a number as a float64, which narrows the
		// events to those equal as float64 (2 and 2.0 are); the text of
		// the number as appended (->) is then compared as a decimal, so
		// that 1.0000000000000001 does not equal 1, as on every store.
		w, _ := match.NumberText(x)
		b.S("(")
		typ().S(" IN ('integer', 'real') AND json_extract(" + col + ", ").Arg(p).S(") = ").Arg(x).
			S(" AND rheo_number_eq(" + col + " -> ").Arg(p).S(", ").Arg(w).S("))")
	}
}

// rheo_number_eq(a, b) is 1 when the JSON numbers a and b (text) stand for
// the same decimal value (match.NumberEqual), for payload filters.
func init() {
	err := sqlite.RegisterDeterministicScalarFunction("rheo_number_eq", 2, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		a, okA := args[0].(string)
		b, okB := args[1].(string)
		if okA && okB && match.NumberEqual(a, b) {
			return int64(1), nil
		}
		return int64(0), nil
	})
	if err != nil {
		panic("sqlite: registering rheo_number_eq: " + err.Error())
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
