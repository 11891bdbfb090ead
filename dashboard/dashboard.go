// Package dashboard serves a web page over a rheo Client: every group's
// health, event search, an event's state in every group, and (when enabled)
// the operator's actions: redrive dead letters, replay, reset a group.
//
// New returns an http.Handler. Mount it anywhere, behind your own
// authentication, under any path prefix with http.StripPrefix:
//
//	d := dashboard.New(client, dashboard.WithWrites(false))
//	defer d.Close()
//	mux.Handle("/rheo/", http.StripPrefix("/rheo", auth(d)))
//
// The pages are server-rendered html/template with embedded assets: they work
// without JavaScript and offline. The only script adds live refresh. Every
// stored string (names, payloads, metadata, reasons) is escaped, the
// Content-Security-Policy forbids inline scripts and styles, and writes are
// refused server-side (403) unless WithWrites(true); each write is a POST
// with a CSRF token bound to a session cookie, behind a confirmation page,
// and logged.
package dashboard

import (
	"crypto/rand"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Option configures a Dashboard.
type Option func(*config)

type config struct {
	writes         bool
	logger         *slog.Logger
	clock          clock.Clock
	sampleInterval time.Duration
	behindAfter    time.Duration
	stuckAfter     time.Duration
	refresh        time.Duration
	parallel       int
}

// WithWrites enables the actions (redrive, replay, reset). Off by default:
// a read-only dashboard answers every write with 403 Forbidden.
func WithWrites(enabled bool) Option { return func(c *config) { c.writes = enabled } }

// WithLogger sets the logger actions are logged to (default: the client's).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithClock sets the clock for ages, expiries and sample times (default
// clock.System). Tests use a clock.Frozen.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithSampleInterval sets how often the dashboard samples every group's lag
// for the lag-over-time chart and stuck detection (default 10s). Zero or
// negative turns the background sampler off; pages still sample what they show.
func WithSampleInterval(d time.Duration) Option {
	return func(c *config) { c.sampleInterval = d }
}

// WithBehindAfter sets how old the oldest pending event of a lagging group
// must be before the group is shown as behind (default 1m).
func WithBehindAfter(d time.Duration) Option { return func(c *config) { c.behindAfter = d } }

// WithStuckAfter sets how long a lagging group's frontier must stay still
// while the dashboard watches before the group is shown as stuck (default 5m).
func WithStuckAfter(d time.Duration) Option { return func(c *config) { c.stuckAfter = d } }

// WithRefresh sets the live-refresh interval of the overview and group pages
// (default 5s); zero or negative disables live refresh.
func WithRefresh(d time.Duration) Option { return func(c *config) { c.refresh = d } }

// Dashboard is the http.Handler returned by New. Close stops its sampler.
type Dashboard struct {
	c      *rheo.Client
	cfg    config
	log    *slog.Logger
	mux    *http.ServeMux
	pages  map[string]*pageTemplate
	key    [32]byte // CSRF tokens are HMACs of the session under this key
	series *sampler

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// New returns a dashboard over c. It starts a background sampler (see
// WithSampleInterval); call Close to stop it.
func New(c *rheo.Client, opts ...Option) *Dashboard {
	cfg := config{
		clock:          clock.System,
		sampleInterval: 10 * time.Second,
		behindAfter:    time.Minute,
		stuckAfter:     5 * time.Minute,
		refresh:        5 * time.Second,
		parallel:       8,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.clock == nil {
		cfg.clock = clock.System
	}
	if cfg.logger == nil {
		cfg.logger = c.Logger()
	}
	d := &Dashboard{
		c: c, cfg: cfg, log: cfg.logger,
		pages:  mustParsePages(),
		series: newSampler(cfg.stuckAfter),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	_, _ = rand.Read(d.key[:])
	d.routes()
	if cfg.sampleInterval > 0 {
		go d.sampleLoop()
	} else {
		close(d.done)
	}
	return d
}

// Close stops the background sampler and waits for it. It does not close
// the client.
func (d *Dashboard) Close() error {
	d.stopOnce.Do(func() { close(d.stop) })
	<-d.done
	return nil
}

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", d.overview)
	m.HandleFunc("GET /streams/{stream}/groups/{group}", d.groupPage)
	m.HandleFunc("GET /events", d.search)
	m.HandleFunc("GET /streams/{stream}/events/{partition}/{seq}", d.eventPage)
	for _, a := range []string{"redrive", "replay", "reset"} {
		m.HandleFunc("GET /streams/{stream}/groups/{group}/"+a, d.confirm(a))
		m.HandleFunc("POST /streams/{stream}/groups/{group}/"+a, d.act(a))
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, http.StatusNotFound, "No such page.")
	})
	d.mux = m
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No inline script or style anywhere: everything is served from /static.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	d.mux.ServeHTTP(w, r)
}

// basePath is the prefix the handler is mounted under: what http.StripPrefix
// (or any router) removed from the request path. Links are built on it, so
// the pages work under any prefix without configuration.
func basePath(r *http.Request) string {
	uri := r.RequestURI
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	if strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://") {
		return "" // absolute-form request (proxies): no prefix to recover
	}
	rest := r.URL.EscapedPath()
	if !strings.HasSuffix(uri, rest) {
		return ""
	}
	base := strings.TrimSuffix(uri, rest)
	if !strings.HasPrefix(base, "/") || strings.HasPrefix(base, "//") {
		return ""
	}
	return base
}
