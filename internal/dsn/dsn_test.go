package dsn

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://rheo:secret@db:5432/x":         "postgres://rheo:xxxxx@db:5432/x",
		"redis://:pw@h:6379/0":                     "redis://:xxxxx@h:6379/0",
		"mongodb://u@h/db":                         "mongodb://u@h/db",
		"postgres://u:p@ss:w@rd@h/db":              "postgres://u:xxxxx@h/db",
		"postgres://a:b:c@h/db?application_name=x": "postgres://a:xxxxx@h/db?application_name=x",
		"sqlite:rheo.db":                           "sqlite:rheo.db",
		"postgres://h/db":                          "postgres://h/db",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseErrorNamesTheProblem(t *testing.T) {
	parse := func(s string) error { _, err := url.Parse(s); return err }
	msg := ParseError("redis://u:secret@h:x/0", parse).Error()
	if strings.Contains(msg, "secret") || !strings.Contains(msg, `invalid port ":x"`) {
		t.Fatalf("ParseError = %q, want the port named and the password hidden", msg)
	}
	// What is wrong is in the hidden part: the message says where to look.
	refuse := func(s string) error {
		if strings.Contains(s, "sec%") {
			return errors.New("bad escape in " + s)
		}
		return nil
	}
	msg = ParseError("postgres://u:sec%zz@h/db", refuse).Error()
	if strings.Contains(msg, "sec") || !strings.Contains(msg, "percent-encode") {
		t.Fatalf("ParseError = %q", msg)
	}
}

// FuzzRedact checks that neither Redact nor ParseError shows a password,
// however the user name, password and the rest are spelled, for parsers
// that quote their input whole.
func FuzzRedact(f *testing.F) {
	f.Add("u", "s3cret-pw", "h:5432/db?sslmode=disable")
	f.Add("?", "000000", "0:0/0?0")
	f.Add("u@", "s3cret@pw", "h/d")
	f.Add("a:b", "pa/ss?wd", "h")
	f.Fuzz(func(t *testing.T, user, password, rest string) {
		const marker = "Pw0rdMark" // found nowhere else, so any echo shows
		if strings.Contains(user+rest, marker) {
			return
		}
		dsn := "postgres://" + user + ":" + marker + password + "@" + rest
		if got := Redact(dsn); strings.Contains(got, marker) {
			t.Fatalf("Redact(%q) = %q shows the password", dsn, got)
		}
		quote := func(s string) error { return errors.New("cannot parse " + s) }
		if got := ParseError(dsn, quote).Error(); strings.Contains(got, marker) {
			t.Fatalf("ParseError(%q) = %q shows the password", dsn, got)
		}
	})
}
