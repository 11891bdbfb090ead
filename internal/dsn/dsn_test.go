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

func TestTakeParams(t *testing.T) {
	own := []string{"rheo_schema", "key_prefix"}
	rest, params, err := TakeParams("sslmode=disable&rheo_schema=my%5Fschema&&application_name=a%20b&key_prefix=app+1%3A", own...)
	if err != nil {
		t.Fatal(err)
	}
	if rest != "sslmode=disable&application_name=a%20b" {
		t.Errorf("rest = %q, want the other parameters as they were, in order", rest)
	}
	if params["rheo_schema"] != "my_schema" || params["key_prefix"] != "app 1:" {
		t.Errorf("params = %q, want them decoded", params)
	}
	if rest, params, err := TakeParams("", own...); err != nil || rest != "" || len(params) != 0 {
		t.Errorf(`TakeParams("") = %q, %q, %v`, rest, params, err)
	}

	// Every refusal names the parameter and what to do.
	for query, want := range map[string]string{
		"rheo_schema=":                  "parameter rheo_schema is empty: give it a value, or leave it out for the default",
		"x=1&rheo_schema":               "parameter rheo_schema is empty",
		"rheo_schema=a&rheo_schema=b":   `parameter rheo_schema is given twice ("a" and "b"): give it once`,
		"rheo_schema=a&rheo%5Fschema=a": `parameter rheo_schema is given twice ("a" and "a")`,
		"rheo_schem=x":                  `unknown parameter "rheo_schem": did you mean rheo_schema?`,
		"RHEO_SCHEMA=x":                 `unknown parameter "RHEO_SCHEMA": did you mean rheo_schema?`,
		"Key_Prefix=x":                  `unknown parameter "Key_Prefix": did you mean key_prefix?`,
		"rheo.tenant=x":                 `unknown parameter "rheo.tenant": this store's own parameters are rheo_schema, key_prefix`,
		"key_prefix=50%":                "parameter key_prefix=50% does not decode",
	} {
		_, _, err := TakeParams(query, own...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("TakeParams(%q) = %v, want an error containing %q", query, err, want)
		}
	}
	// A store with no parameters of its own still refuses rheo's.
	if _, _, err := TakeParams("rheo_schema=x"); err == nil || !strings.Contains(err.Error(), `takes no parameter starting with "rheo"`) {
		t.Errorf("TakeParams with no own parameters = %v", err)
	}
	// Parameters of the driver are not rheo's business, even repeated or empty.
	if rest, _, err := TakeParams("options=&options=x&search_path=", own...); err != nil || rest != "options=&options=x&search_path=" {
		t.Errorf("driver parameters: %q, %v", rest, err)
	}
}
