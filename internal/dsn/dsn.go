// Package dsn hides the password of a URL-style data source name before
// the DSN, or an error about it, is shown, and takes rheo's own parameters
// out of a DSN's query (TakeParams).
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
	"fmt"
	"net/url"
	"slices"
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

// TakeParams takes rheo's own parameters, those named in own, out of a
// DSN's query (the text after '?'). It returns them decoded as a URL query
// is (%XX escapes, '+' for a space) and the rest of the query as it was:
// the other parameters undecoded and in their order, for the driver.
//
// It refuses, with an error that names the parameter and the fix:
//   - a parameter of own given twice (which one wins would be a guess);
//   - a parameter of own with an empty value (an unset variable in a
//     template, most likely; leaving the parameter out gives the default);
//   - a value that does not decode;
//   - a parameter that is not one of own but is meant for rheo: its name
//     starts with "rheo", or is one of own in another letter case. A
//     driver would pass it on, or ignore it, and the store would run
//     without the setting.
func TakeParams(query string, own ...string) (rest string, params map[string]string, err error) {
	params = map[string]string{}
	var keep []string
	for _, kv := range strings.Split(query, "&") {
		if kv == "" {
			continue
		}
		rawKey, rawValue, _ := strings.Cut(kv, "=")
		key, kerr := url.QueryUnescape(rawKey)
		if kerr != nil {
			keep = append(keep, kv) // not a name of rheo's; the driver says what is wrong
			continue
		}
		if !slices.Contains(own, key) {
			if meantForRheo(key, own) {
				return "", nil, fmt.Errorf("unknown parameter %q%s", key, suggest(key, own))
			}
			keep = append(keep, kv)
			continue
		}
		value, verr := url.QueryUnescape(rawValue)
		if verr != nil {
			return "", nil, fmt.Errorf("parameter %s=%s does not decode (%v): percent-encode a '%%' as %%25", key, rawValue, verr)
		}
		if first, dup := params[key]; dup {
			return "", nil, fmt.Errorf("parameter %s is given twice (%q and %q): give it once", key, first, value)
		}
		if value == "" {
			return "", nil, fmt.Errorf("parameter %s is empty: give it a value, or leave it out for the default", key)
		}
		params[key] = value
	}
	return strings.Join(keep, "&"), params, nil
}

// meantForRheo reports whether a parameter name that is not one of own was
// meant as one: it starts with "rheo" in any letter case, or is one of own
// in another letter case.
func meantForRheo(key string, own []string) bool {
	if strings.HasPrefix(strings.ToLower(key), "rheo") {
		return true
	}
	for _, o := range own {
		if strings.EqualFold(key, o) {
			return true
		}
	}
	return false
}

// suggest names the parameter of own closest to key, or lists them all.
func suggest(key string, own []string) string {
	if len(own) == 0 {
		return ": this store takes no parameter starting with \"rheo\""
	}
	best, bestD := "", 4 // at most three edits away
	for _, o := range own {
		if d := distance(strings.ToLower(key), o); d < bestD {
			best, bestD = o, d
		}
	}
	if best != "" {
		return fmt.Sprintf(": did you mean %s?", best)
	}
	return fmt.Sprintf(": this store's own parameters are %s", strings.Join(own, ", "))
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
