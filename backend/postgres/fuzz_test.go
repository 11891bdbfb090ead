package postgres

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rheo-go/rheo"
)

// FuzzSplitSchema checks the DSN's rheo_schema parameter is taken out,
// whatever surrounds it: the rest of the DSN reaches PostgreSQL unchanged
// and in order, the schema is the parameter's decoded value, and a DSN
// with rheo_schema twice, an empty or undecodable one, or another
// parameter starting with "rheo" is refused.
func FuzzSplitSchema(f *testing.F) {
	for _, s := range []string{"postgres://h/db", "postgres://h/db?rheo_schema=s1", "postgres://h/db?sslmode=disable&rheo_schema=a&x=1",
		"postgres://h/db?rheo_schema=a&rheo_schema=b", "postgres://h/db?&&rheo_schema=", "host=h dbname=d", "?", "postgres://h?rheo_schema=a?b",
		"postgres://h/db?rheo_schema=my%5Fschema", "postgres://h/db?RHEO_SCHEMA=s", "postgres://h/db?rheo_schem=s", "postgres://h/db?rheo%5Fschema=s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		out, schema, err := splitSchema(dsn)
		base, query, hasQuery := strings.Cut(dsn, "?")
		var want []string
		last, n, refuse := "", 0, false
		if hasQuery {
			for _, kv := range strings.Split(query, "&") {
				k, v, _ := strings.Cut(kv, "=")
				key, kerr := url.QueryUnescape(k)
				switch {
				case kerr == nil && key == "rheo_schema":
					value, verr := url.QueryUnescape(v)
					n++
					last = value
					refuse = refuse || verr != nil || value == "" || n > 1
				case kerr == nil && strings.HasPrefix(strings.ToLower(key), "rheo"):
					refuse = true
				case kv != "":
					want = append(want, kv)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, rheo.ErrInvalidArgument) {
				t.Fatalf("splitSchema(%q): %v is not ErrInvalidArgument", dsn, err)
			}
			if !refuse {
				t.Fatalf("splitSchema(%q) refused it: %v", dsn, err)
			}
			return
		}
		if refuse {
			t.Fatalf("splitSchema(%q) accepted it (schema %q)", dsn, schema)
		}
		if !strings.HasPrefix(out, base) {
			t.Fatalf("splitSchema(%q) changed the DSN's base: %q", dsn, out)
		}
		if schema != last {
			t.Fatalf("splitSchema(%q) schema %q, want %q", dsn, schema, last)
		}
		_, gotQuery, _ := strings.Cut(out, "?")
		if got := strings.Join(want, "&"); gotQuery != got {
			t.Fatalf("splitSchema(%q) kept %q, want %q", dsn, gotQuery, got)
		}
	})
}

// FuzzDSNRedaction checks that a DSN which does not parse never echoes its
// password, or any part of it, in the error Open returns. The password
// starts with a marker found nowhere else, so that any echo of it shows.
func FuzzDSNRedaction(f *testing.F) {
	f.Add("u", "s3cret-pw", "h", "5432", "db", "sslmode=disable")
	f.Add("u", "s3cret-pw", "h", "x", "db", "")
	f.Add("u", "s3cret-pw", "h", "1", "db", "sslmode=nope")
	f.Add("u", "s3cret-pw", "h:1", "2", "db", "connect_timeout=z")
	f.Add("u@", "s3cret@pw", "h", "5432", "d", "")
	f.Fuzz(func(t *testing.T, user, password, host, port, db, query string) {
		const marker = "Pw0rdMark"
		if strings.Contains(user+host+port+db+query, marker) {
			return
		}
		password = marker + password
		dsn := "postgres://" + user + ":" + password + "@" + host + ":" + port + "/" + db
		if query != "" {
			dsn += "?" + query
		}
		dsn, _, err := splitSchema(dsn)
		if err != nil {
			return
		}
		_, err = pgxpool.ParseConfig(dsn)
		if err == nil {
			return
		}
		if msg := parseError(dsn).Error(); strings.Contains(msg, marker) {
			t.Fatalf("DSN %q: error %q shows the password", dsn, msg)
		}
	})
}
