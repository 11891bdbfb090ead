package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/rheo-go/rheo"
)

const sessionCookie = "rheo_dashboard_session"

// csrfToken returns the CSRF token of the request's session, starting a
// session (a random cookie) when there is none. The token is an HMAC of the
// session under a key that lives only in this process, so a token is
// worthless without the matching cookie, and the cookie (SameSite=Strict,
// HttpOnly) is never sent by another site's form.
func (d *Dashboard) csrfToken(w http.ResponseWriter, r *http.Request) string {
	sess := ""
	if c, err := r.Cookie(sessionCookie); err == nil && validSession(c.Value) {
		sess = c.Value
	} else {
		var b [32]byte
		_, _ = rand.Read(b[:])
		sess = hex.EncodeToString(b[:])
		path := basePath(r) + "/"
		http.SetCookie(w, &http.Cookie{
			Name: sessionCookie, Value: sess, Path: path,
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
		})
	}
	return d.sign(sess)
}

func validSession(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32
}

func (d *Dashboard) sign(sess string) string {
	m := hmac.New(sha256.New, d.key[:])
	m.Write([]byte("csrf:" + sess))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the form's token matches the session cookie.
func (d *Dashboard) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !validSession(c.Value) {
		return false
	}
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(d.sign(c.Value)))
}

// param is one parameter of an action: shown on the confirmation page and
// carried by its form.
type param struct {
	Key, Value string // label and display
	Name, Raw  string // form field and value
}

type confirmView struct {
	Action, Stream, Group string
	Heading, Explain      string
	Button                string
	Danger, TypeName      bool
	Params                []param
	Error                 string
}

type resultView struct {
	Stream, Group    string
	Heading, Message string
	Rows             []keyValue
}

// action is a validated operator action, ready to confirm or run.
type action struct {
	name, stream, group string
	event               string // redrive: one event, or all when ""
	fromSeq             *int64 // replay
	fromTime            time.Time
	start               string // reset: beginning or latest
}

// parseAction reads an action's parameters from the query (confirmation
// page) or the posted form; the error is for the operator.
func parseAction(name string, r *http.Request, get func(string) string) (action, error) {
	a := action{name: name, stream: r.PathValue("stream"), group: r.PathValue("group")}
	switch name {
	case "redrive":
		a.event = get("event")
	case "replay":
		seq, at := get("from_sequence"), get("from_time")
		switch {
		case seq != "" && at != "":
			return a, rheo.Errorf(rheo.ErrInvalidArgument, "give a sequence or a time to replay from, not both")
		case seq != "":
			n, err := strconv.ParseInt(seq, 10, 64)
			if err != nil || n < 0 {
				return a, rheo.Errorf(rheo.ErrInvalidArgument, "replay from sequence %q: want a sequence number, 0 or more", seq)
			}
			a.fromSeq = &n
		case at != "":
			t, err := parseTime("replay from time", at)
			if err != nil {
				return a, rheo.Wrap(rheo.ErrInvalidArgument, err, "replay")
			}
			a.fromTime = t
		default:
			return a, rheo.Errorf(rheo.ErrInvalidArgument, "replay needs a sequence or a time to replay from")
		}
	case "reset":
		a.start = get("start")
		if a.start == "" {
			a.start = "beginning"
		}
		if a.start != "beginning" && a.start != "latest" {
			return a, rheo.Errorf(rheo.ErrInvalidArgument, "reset start %q: want beginning or latest", a.start)
		}
	}
	return a, nil
}

func (a action) confirmView(dead int64) confirmView {
	v := confirmView{Action: a.name, Stream: a.stream, Group: a.group}
	switch a.name {
	case "redrive":
		v.Heading, v.Button = "Redrive every dead letter?", "Redrive all"
		if a.event != "" {
			v.Heading, v.Button = "Redrive this dead letter?", "Redrive"
			v.Explain = "The dead letter becomes available again with its attempts reset; a consumer of the group will receive it."
			v.Params = []param{{Key: "Event", Value: a.event, Name: "event", Raw: a.event}}
		} else {
			v.Explain = "Every dead letter of the group becomes available again with its attempts reset; consumers of the group will receive them."
			v.Params = []param{{Key: "Dead letters", Value: formatInt(dead) + " (all)"}}
		}
	case "replay":
		v.Heading, v.Button, v.Danger = "Replay the group?", "Replay", true
		v.Explain = "Every delivery in the range is reopened, acked ones included: consumers of the group will receive those events again, and the leases held on them become stale."
		if a.fromSeq != nil {
			s := strconv.FormatInt(*a.fromSeq, 10)
			v.Params = []param{{Key: "After sequence", Value: s + " (in every partition)", Name: "from_sequence", Raw: s}}
		} else {
			s := a.fromTime.UTC().Format(time.RFC3339Nano)
			v.Params = []param{{Key: "From time", Value: s, Name: "from_time", Raw: s}}
		}
	case "reset":
		v.Heading, v.Button, v.Danger, v.TypeName = "Reset the group?", "Reset", true, true
		v.Explain = "The group forgets every delivery, lease and dead letter and restarts at the chosen position. This cannot be undone."
		label := map[string]string{"beginning": "the beginning", "latest": "the latest event (skip the backlog)"}[a.start]
		v.Params = []param{{Key: "Restart at", Value: label, Name: "start", Raw: a.start}}
	}
	return v
}

// confirm serves an action's confirmation page.
func (d *Dashboard) confirm(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.cfg.writes {
			d.refuse(w, r, name)
			return
		}
		a, err := parseAction(name, r, r.URL.Query().Get)
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		info, err := d.c.GroupInfo(r.Context(), a.stream, a.group)
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		d.render(w, r, http.StatusOK, "confirm", view{Title: "Confirm " + name, Nav: "overview", Data: a.confirmView(info.DeadLetters)})
	}
}

// refuse answers a write on a read-only dashboard.
func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request, name string) {
	d.log.WarnContext(r.Context(), "dashboard: write refused (read-only)", "action", name,
		"stream", r.PathValue("stream"), "group", r.PathValue("group"), "remote", r.RemoteAddr)
	d.fail(w, r, http.StatusForbidden, "This dashboard is read-only: "+name+" is disabled. Start it with --allow-writes (dashboard.WithWrites(true)) to enable actions.")
}

// maxForm bounds an action's posted form.
const maxForm = 64 << 10

// act runs a confirmed action.
func (d *Dashboard) act(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.cfg.writes {
			d.refuse(w, r, name)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			d.fail(w, r, http.StatusBadRequest, "The form does not parse: "+err.Error())
			return
		}
		if !d.checkCSRF(r) {
			d.log.WarnContext(r.Context(), "dashboard: write refused (bad CSRF token)", "action", name,
				"stream", r.PathValue("stream"), "group", r.PathValue("group"), "remote", r.RemoteAddr)
			d.fail(w, r, http.StatusForbidden, "The form's security token is missing or expired. Go back, reload the page and try again.")
			return
		}
		a, err := parseAction(name, r, r.PostFormValue)
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		if name == "reset" && r.PostFormValue("confirm_name") != a.group {
			v := a.confirmView(0)
			v.Error = "The name you typed does not match the group name; nothing was reset."
			d.render(w, r, http.StatusBadRequest, "confirm", view{Title: "Confirm reset", Nav: "overview", Data: v})
			return
		}
		res, err := d.run(r.Context(), a)
		log := d.log.With("action", name, "stream", a.stream, "group", a.group, "remote", r.RemoteAddr)
		if err != nil {
			log.ErrorContext(r.Context(), "dashboard: action failed", "err", err)
			d.failErr(w, r, err)
			return
		}
		log.InfoContext(r.Context(), "dashboard: action", "result", res.Message)
		d.render(w, r, http.StatusOK, "result", view{Title: res.Heading, Nav: "overview", Data: res})
	}
}

// run performs the action and describes what it did.
func (d *Dashboard) run(ctx context.Context, a action) (resultView, error) {
	res := resultView{Stream: a.stream, Group: a.group}
	switch a.name {
	case "redrive":
		var ids []string
		if a.event != "" {
			ids = []string{a.event}
		}
		n, err := d.c.Redrive(ctx, a.stream, a.group, ids...)
		if err != nil {
			return res, err
		}
		res.Heading = "Redriven"
		res.Message = "Reopened " + formatInt(n) + " dead letter" + plural(n) + "."
		if a.event != "" && n == 0 {
			res.Message = "Reopened 0 dead letters: event " + a.event + " is not a dead letter of the group (any more)."
		}
	case "replay":
		before, err := d.c.Lag(ctx, a.stream, a.group)
		if err != nil {
			return res, err
		}
		from := rheo.FromTime(a.fromTime)
		if a.fromSeq != nil {
			from = rheo.FromSequence(*a.fromSeq)
		}
		n, err := d.c.Replay(ctx, a.stream, a.group, from)
		if err != nil {
			return res, err
		}
		after, err := d.c.Lag(ctx, a.stream, a.group)
		if err != nil {
			return res, err
		}
		res.Heading = "Replayed"
		res.Message = "Reopened " + formatInt(n) + " deliver" + pluralY2(n) + "."
		res.Rows = []keyValue{{"Lag before", formatInt(before.Total)}, {"Lag after", formatInt(after.Total)}}
	case "reset":
		before, err := d.c.GroupInfo(ctx, a.stream, a.group)
		if err != nil {
			return res, err
		}
		start := rheo.Beginning()
		if a.start == "latest" {
			start = rheo.Latest()
		}
		n, err := d.c.ResetGroup(ctx, a.stream, a.group, rheo.ResetOptions{Confirm: true, Start: start})
		if err != nil {
			return res, err
		}
		after, err := d.c.Lag(ctx, a.stream, a.group)
		if err != nil {
			return res, err
		}
		res.Heading = "Reset"
		res.Message = "The group restarted at " + a.start + "; reopened " + formatInt(n) + " deliver" + pluralY2(n) + "; " +
			formatInt(after.Total) + " deliver" + pluralY(after.Total) + " now pending."
		res.Rows = []keyValue{
			{"Lag before", formatInt(before.Lag.Total)}, {"Lag after", formatInt(after.Total)},
			{"Dead letters forgotten", formatInt(before.DeadLetters)}, {"Leases forgotten", formatInt(before.Inflight)},
		}
	}
	return res, nil
}

func plural(n int) string { return plural64(int64(n)) }

func plural64(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pluralY2(n int) string {
	if n == 1 {
		return "y"
	}
	return "ies"
}

func pluralY(n int64) string {
	if n == 1 {
		return "y is"
	}
	return "ies are"
}
