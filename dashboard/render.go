package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rheo-go/rheo"
)

// pageTemplate is one page: the layout plus the page's own "content".
type pageTemplate = template.Template

var pageNames = []string{"overview", "group", "search", "event", "confirm", "result", "error"}

func mustParsePages() map[string]*pageTemplate {
	funcs := template.FuncMap{
		"groupURL": groupURL,
		"eventURL": eventURL,
		"actionURL": func(base, stream, group, action string) string {
			return groupURL(base, stream, group) + "/" + action
		},
		"num":   formatInt,
		"ts":    formatTime,
		"age":   formatAge,
		"until": formatUntil,
		"add":   func(a, b int) int { return a + b },
	}
	pages := make(map[string]*pageTemplate, len(pageNames))
	for _, name := range pageNames {
		t := template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
		pages[name] = t
	}
	return pages
}

// view is what every page template receives.
type view struct {
	Base    string
	Title   string
	Nav     string // which top-level section is active
	Writes  bool
	Refresh int // live refresh interval in seconds; 0 disables
	CSRF    string
	Now     time.Time
	Data    any
}

// render executes a page into a buffer first, so that a template error never
// leaves a half-written page behind a 200.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	v.Base = basePath(r)
	v.Writes = d.cfg.writes
	v.Now = d.cfg.clock.Now()
	if v.Refresh > 0 && d.cfg.refresh > 0 {
		v.Refresh = max(int(d.cfg.refresh/time.Second), 1)
	} else {
		v.Refresh = 0
	}
	if d.cfg.writes && v.CSRF == "" {
		v.CSRF = d.csrfToken(w, r)
	}
	var buf bytes.Buffer
	if err := d.pages[page].Execute(&buf, v); err != nil {
		d.log.ErrorContext(r.Context(), "dashboard: render", "page", page, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page with a message meant for the operator.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	d.render(w, r, status, "error", view{Title: http.StatusText(status), Data: errorView{Status: status, Message: msg}})
}

type errorView struct {
	Status  int
	Message string
}

// failErr maps a rheo error onto a status: unknown names are 404, bad input
// 400, anything else 500 (and logged, since the operator cannot fix it).
func (d *Dashboard) failErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, rheo.ErrStreamNotFound), errors.Is(err, rheo.ErrGroupNotFound):
		d.fail(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, rheo.ErrInvalidArgument), errors.Is(err, rheo.ErrInvalidPartition),
		errors.Is(err, rheo.ErrCursorNotFound), errors.Is(err, rheo.ErrNoEventsInRange):
		d.fail(w, r, http.StatusBadRequest, err.Error())
	default:
		d.log.ErrorContext(r.Context(), "dashboard: request failed", "path", r.URL.Path, "err", err)
		d.fail(w, r, http.StatusInternalServerError, err.Error())
	}
}

func groupURL(base, stream, group string) string {
	return base + "/streams/" + url.PathEscape(stream) + "/groups/" + url.PathEscape(group)
}

func eventURL(base, stream string, partition int, seq int64) string {
	return base + "/streams/" + url.PathEscape(stream) + "/events/" + strconv.Itoa(partition) + "/" + strconv.FormatInt(seq, 10)
}

// formatInt groups digits by thousands: 1,000,000.
func formatInt(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	default:
		return fmt.Sprint(v)
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// formatAge is how long ago t was, relative to now, in coarse units.
func formatAge(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return humanDuration(now.Sub(t))
}

// formatUntil is how long until t, or "expired" when it has passed.
func formatUntil(now, t time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "expired " + humanDuration(-d) + " ago"
	}
	return "in " + humanDuration(d)
}

func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd %dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// prettyJSON indents a payload for display; invalid JSON is shown as is.
func prettyJSON(p json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, p, "", "  "); err != nil {
		return string(p)
	}
	return b.String()
}

type keyValue struct{ Key, Value string }

func sortedMeta(m map[string]string) []keyValue {
	kv := make([]keyValue, 0, len(m))
	for k, v := range m {
		kv = append(kv, keyValue{k, v})
	}
	sort.Slice(kv, func(i, j int) bool { return kv[i].Key < kv[j].Key })
	return kv
}
