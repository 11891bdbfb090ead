package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rheo-go/rheo"
)

var sentinels = []error{
	rheo.ErrStreamNotFound, rheo.ErrGroupNotFound, rheo.ErrAlreadyExists, rheo.ErrInvalidPartition,
	rheo.ErrInvalidArgument, rheo.ErrStaleLease, rheo.ErrReceiptMismatch, rheo.ErrCursorNotFound,
	rheo.ErrConfirmRequired, rheo.ErrNoEventsInRange, rheo.ErrUnsupported, rheo.ErrBackendUnavailable,
	rheo.ErrAmbiguous, rheo.ErrClosed, rheo.ErrMisconfigured,
}

// misconfiguredHints are the SQLSTATEs no retry can cure, with what to fix.
var misconfiguredHints = map[string]string{
	"42P01": "the schema is not migrated: run `rheo migrate --dsn DSN` or Client.Migrate",
	"3F000": "the schema is not migrated: run `rheo migrate --dsn DSN` or Client.Migrate",
	"28P01": "authentication failed: check the user and password in the DSN (and pg_hba.conf)",
	"28000": "authentication failed: check the user and password in the DSN (and pg_hba.conf)",
	"3D000": "the database does not exist: create it or fix the DSN",
	"42501": "permission denied: grant the role access to the schema, or use another role",
}

// connectHints are the SQLSTATEs a server answers a connection with when
// the DSN passed it a setting (a parameter pgx does not know goes to the
// server as a run-time setting) it refuses, with what to fix.
var connectHints = map[string]string{
	"42704": "a DSN parameter is not a PostgreSQL setting: fix its name or remove it (rheo's own parameter is rheo_schema)",
	"22023": "a DSN parameter has a value PostgreSQL refuses: fix the value or remove the parameter",
}

// misconfigured names the fix for a server error no retry can cure, or
// returns "".
func misconfigured(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return ""
	}
	if hint := misconfiguredHints[pe.Code]; hint != "" {
		return hint
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return connectHints[pe.Code]
	}
	return ""
}

// classify maps a pgx/pgconn error onto rheo's vocabulary. write says the
// statement may change state: when such a statement was (or may have been)
// sent and the outcome was not heard — a timeout, a cancelled context, a
// connection lost mid-flight — the change may have committed, so it is
// ErrAmbiguous. When nothing was sent (connection refused, pool closed, a
// failure pgconn reports as safe to retry) or the server rejected the
// statement, nothing was written: ErrBackendUnavailable, or a more precise
// sentinel for the server errors that name bad input.
func classify(err error, write bool, format string, args ...any) error {
	if err == nil {
		return nil
	}
	for _, k := range sentinels {
		if errors.Is(err, k) {
			return err
		}
	}
	msg := fmt.Sprintf(format, args...)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		hint := misconfigured(err)
		switch {
		case pe.Code == "23505":
			return rheo.Wrap(rheo.ErrAlreadyExists, err, "%s", msg)
		case pe.Code == "22P05", pe.Code == "22021", pe.Code == "54000", pe.Code == "22001",
			pe.Code == "22P02" && strings.Contains(pe.Message, "json"):
			// Untranslatable characters (a \u0000 in a payload), bad
			// encoding, rows too large for an index: the input is at fault.
			return rheo.Wrap(rheo.ErrInvalidArgument, err, "%s", msg)
		case hint != "":
			return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: %s", msg, hint)
		case strings.HasPrefix(pe.Code, "08") && write:
			return rheo.Wrap(rheo.ErrAmbiguous, err, "%s", msg)
		}
		// Any other server error aborted the statement (and its
		// transaction): nothing was written.
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s", msg)
	}
	if pgconn.SafeToRetry(err) {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s", msg)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s", msg)
	}
	if !write {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s", msg)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return rheo.Wrap(rheo.ErrAmbiguous, err, "%s: outcome unknown", msg)
	}
	return rheo.Wrap(rheo.ErrAmbiguous, err, "%s: connection lost, outcome unknown", msg)
}

// rolledBack reports errors after which the server rolled a transaction back
// for an accident of timing: a deadlock it broke (40P01) or a serialization
// failure (40001). Running the whole transaction again may succeed.
func rolledBack(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// staleStatement reports that a statement pgx cached no longer fits the
// tables (0A000, "cached plan must not change result type", after a
// column's type changed) or is gone from the server (26000): pgx dropped
// it on the error, and running it again prepares it anew.
func staleStatement(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "0A000" && strings.Contains(pe.Message, "cached plan") || pe.Code == "26000")
}

// retryable reports errors after which a single-statement write can simply
// run again: a deadlock or serialization failure rolled it back, and a
// unique violation on an event ID means a concurrent append of the same ID
// committed first (the retry returns the stored event).
func retryable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40P01", "40001":
		return true
	case "23505":
		return strings.Contains(pe.ConstraintName, "events_id")
	}
	return false
}
