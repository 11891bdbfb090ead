// Package dsn hides the password of a URL-style data source name before
// the DSN, or an error about it, is shown.
//
// A DSN that does not parse is ambiguous: a user name may hold ':' or '@',
// a password '/', '?' or '@', and a parser's error may quote any part of
// it. Redact therefore hides everything a password could be in any reading
// — from the first ':' after the scheme's "//" up to the last '@' — and
// errors about a DSN are produced by parsing the redacted DSN, so that
// they cannot quote what is hidden.
package dsn

import (
	"errors"
	"strings"
)

// Mask is what Redact puts in place of a password.
const Mask = "xxxxx"

// Redact returns dsn with its password replaced by Mask. A DSN that is not
// URL-style (no "://"), or that has no '@' after the scheme, is returned
// unchanged; so is one whose user information holds no ':'.
func Redact(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return dsn
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return dsn
	}
	return scheme + "://" + user + ":" + Mask + rest[at:]
}

// ParseError returns the error to show for a DSN that parse refused: the
// error parse gives for the redacted DSN, which cannot quote the password.
// When the redacted DSN parses (what was wrong was in the hidden part), it
// says so and shows the redacted DSN.
func ParseError(dsn string, parse func(string) error) error {
	red := Redact(dsn)
	if err := parse(red); err != nil {
		return err
	}
	if red == dsn {
		return errors.New("it does not parse")
	}
	return errors.New("the user name or password of " + red + " does not parse; percent-encode any '@', ':', '/', '?', '#' or '%' in them (for example '@' as %40)")
}
