package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/dashboard"
)

// t0 is when every fixture starts; the clocks are frozen there.
var t0 = time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)

// fixture is a store with data, a dashboard over it and a browser-like
// client (with a cookie jar) talking to it over HTTP.
type fixture struct {
	t      *testing.T
	c      *rheo.Client
	clk    *clock.Frozen
	srv    *httptest.Server
	http   *http.Client
	prefix string
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newFixture serves a dashboard over a fresh store of the given kind,
// mounted under /ops/rheo like a user would mount it.
func newFixture(t *testing.T, kind string, opts ...dashboard.Option) *fixture {
	t.Helper()
	clk := clock.NewFrozen(t0)
	c := rheo.New(newBackend(t, kind), rheo.WithClock(clk))
	logs := &syncBuffer{}
	opts = append([]dashboard.Option{
		dashboard.WithClock(clk), dashboard.WithSampleInterval(0),
		dashboard.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
	}, opts...)
	d := dashboard.New(c, opts...)
	mux := http.NewServeMux()
	mux.Handle("/ops/rheo/", http.StripPrefix("/ops/rheo", d))
	srv := httptest.NewServer(mux)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, d.Close())
	})
	return &fixture{t: t, c: c, clk: clk, srv: srv, prefix: "/ops/rheo", logs: logs,
		http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get fetches a dashboard path and returns status and body.
func (f *fixture) get(path string) (int, string) {
	f.t.Helper()
	resp, err := f.http.Get(f.srv.URL + f.prefix + path)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return resp.StatusCode, string(b)
}

// getOK fetches a page that must answer 200.
func (f *fixture) getOK(path string) string {
	f.t.Helper()
	status, body := f.get(path)
	require.Equal(f.t, http.StatusOK, status, "GET %s: %s", path, body)
	return body
}

func (f *fixture) post(path string, form url.Values) (int, string) {
	f.t.Helper()
	resp, err := f.http.PostForm(f.srv.URL+f.prefix+path, form)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// confirmAndPost opens an action's confirmation page (path with query),
// then submits its form with the fields it carries plus extra.
func (f *fixture) confirmAndPost(path string, extra url.Values) (int, string) {
	f.t.Helper()
	page := f.getOK(path)
	m := csrfRE.FindStringSubmatch(page)
	require.NotNil(f.t, m, "confirmation page has no CSRF token: %s", page)
	form := url.Values{"csrf": {m[1]}}
	for _, h := range regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`).FindAllStringSubmatch(page, -1) {
		if h[1] != "csrf" {
			form.Set(h[1], htmlUnescape(h[2]))
		}
	}
	for k, v := range extra {
		form[k] = v
	}
	target, _, _ := strings.Cut(path, "?")
	return f.post(target, form)
}

func htmlUnescape(s string) string {
	r := strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&#43;", "+")
	return r.Replace(s)
}

func groupPath(stream, group string) string {
	return "/streams/" + url.PathEscape(stream) + "/groups/" + url.PathEscape(group)
}

// seed builds the standard scene: stream "orders" (3 partitions, 30 events
// a minute apart), group "billing" with 6 acked, 2 leased and 2 dead
// letters, and an untouched group "audit".
func (f *fixture) seed() {
	f.t.Helper()
	ctx := context.Background()
	require.NoError(f.t, f.c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 3}))
	var ms []rheo.Message
	for i := range 30 {
		typ := "order.created"
		if i%2 == 1 {
			typ = "order.paid"
		}
		country := "FR"
		if i%3 == 0 {
			country = "DE"
		}
		ms = append(ms, rheo.Message{
			ID: fmt.Sprintf("ev-%02d", i), Type: typ, Key: fmt.Sprintf("cust-%d", i%5),
			Payload:   json.RawMessage(fmt.Sprintf(`{"n":%d,"customer":{"country":%q}}`, i, country)),
			Metadata:  map[string]string{"correlation_id": fmt.Sprintf("corr-%d", i%4)},
			Timestamp: t0.Add(time.Duration(i) * time.Minute),
		})
	}
	_, err := f.c.AppendBatch(ctx, "orders", ms)
	require.NoError(f.t, err)
	require.NoError(f.t, f.c.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{MaxAttempts: 3}))
	require.NoError(f.t, f.c.CreateGroup(ctx, "orders", "audit", rheo.GroupConfig{}))
	f.clk.Advance(40 * time.Minute) // every event is in the past
	ls, err := f.c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 10, ConsumerID: "worker-1", LeaseDuration: time.Minute})
	require.NoError(f.t, err)
	require.Len(f.t, ls, 10)
	for _, l := range ls[:6] {
		require.NoError(f.t, f.c.Ack(ctx, l))
	}
	for _, l := range ls[6:8] {
		require.NoError(f.t, f.c.Reject(ctx, l, "card declined"))
	}
}

func forStores(t *testing.T, kinds []string, fn func(t *testing.T, kind string)) {
	for _, k := range kinds {
		t.Run(k, func(t *testing.T) { fn(t, k) })
	}
}

var localStores = []string{"memory", "sqlite"}

func TestOverviewShowsEveryGroupWithItsHealth(t *testing.T) {
	forStores(t, []string{"memory", "sqlite", "postgres", "redis"}, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		ctx := context.Background()
		body := f.getOK("/")
		require.Contains(t, body, "orders")
		require.Contains(t, body, "3 partitions · 30 events")
		for _, g := range []string{"billing", "audit"} {
			info, err := f.c.GroupInfo(ctx, "orders", g)
			require.NoError(t, err)
			row := rowOf(t, body, g)
			require.Contains(t, row, `href="/ops/rheo`+groupPath("orders", g)+`"`)
			require.Contains(t, row, fmt.Sprintf(`<td class="n lag">%d</td>`, info.Lag.Total))
			require.Contains(t, row, fmt.Sprintf(`<td class="n">%d</td>`, info.Inflight))
		}
		require.Contains(t, rowOf(t, f.getOK("/"), "billing"), `status-dead-letters`)
		// audit has 30 pending events, the oldest 40 minutes old: behind.
		require.Contains(t, rowOf(t, body, "audit"), `status-behind`)
	})
}

// rowOf returns the overview table row of a group.
func rowOf(t *testing.T, body, group string) string {
	t.Helper()
	i := strings.Index(body, `<tr data-group="`+group+`">`)
	require.GreaterOrEqual(t, i, 0, "no row for group %s", group)
	j := strings.Index(body[i:], "</tr>")
	return body[i : i+j]
}

func TestOverviewStatusFollowsTheGroup(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithBehindAfter(time.Minute), dashboard.WithStuckAfter(10*time.Minute))
		ctx := context.Background()
		require.NoError(t, f.c.CreateStream(ctx, "s", rheo.StreamConfig{}))
		require.NoError(t, f.c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 1}))
		require.Contains(t, rowOf(t, f.getOK("/"), "g"), "status-healthy")

		_, err := f.c.Append(ctx, "s", rheo.Message{})
		require.NoError(t, err)
		require.Contains(t, rowOf(t, f.getOK("/"), "g"), "status-healthy", "fresh lag is not behind")
		f.clk.Advance(2 * time.Minute)
		require.Contains(t, rowOf(t, f.getOK("/"), "g"), "status-behind")
		f.clk.Advance(10 * time.Minute)
		require.Contains(t, rowOf(t, f.getOK("/"), "g"), "status-stuck", "frontier still for 12m")

		ls, err := f.c.Fetch(ctx, "s", "g", rheo.FetchOptions{})
		require.NoError(t, err)
		require.NoError(t, f.c.Reject(ctx, ls[0], "boom"))
		require.Contains(t, rowOf(t, f.getOK("/"), "g"), "status-dead-letters")
		_, err = f.c.Redrive(ctx, "s", "g")
		require.NoError(t, err)
		ls, err = f.c.Fetch(ctx, "s", "g", rheo.FetchOptions{})
		require.NoError(t, err)
		require.NoError(t, f.c.Ack(ctx, ls[0]))
		require.Contains(t, rowOf(t, f.getOK("/"), "g"), "status-healthy")
	})
}

func TestGroupPageShowsPartitionsLeasesAndDeadLetters(t *testing.T) {
	forStores(t, []string{"memory", "sqlite", "postgres", "redis"}, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		ctx := context.Background()
		body := f.getOK(groupPath("orders", "billing"))
		lag, err := f.c.Lag(ctx, "orders", "billing")
		require.NoError(t, err)
		require.Contains(t, body, fmt.Sprintf(`id="lag-total">%d<`, lag.Total))
		for _, p := range lag.Partitions {
			require.Contains(t, body, fmt.Sprintf(`<tr><td class="n">%d</td><td class="n">%d</td><td class="n">%d</td>`,
				p.Partition, p.HighWatermark, p.Frontier))
		}
		dls, err := f.c.DeadLetters(ctx, "orders", "billing", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		require.Len(t, dls, 2)
		for _, dl := range dls {
			require.Contains(t, body, `<tr class="dl" data-event="`+dl.EventID+`">`)
		}
		require.Contains(t, body, `<td class="reason">card declined</td>`)
		require.Contains(t, body, "&#34;country&#34;: ", "payload is pretty-printed")
		require.Contains(t, body, "<th>correlation_id</th>")
		require.Contains(t, body, `<svg class="chart"`)

		// Leases: two held by worker-1, on attempt 1, expiring in a minute.
		if _, ok := f.c.Backend().(rheo.LeaseLister); ok {
			require.Equal(t, 2, strings.Count(body, "<td>worker-1</td>"), body)
			require.Contains(t, body, "<td>in 1m 0s</td>")
		} else {
			require.Contains(t, body, "This store cannot list leases.")
		}
	})
}

func TestGroupPageChartsSamplesTakenWhileRunning(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		ctx := context.Background()
		require.NoError(t, f.c.CreateStream(ctx, "s", rheo.StreamConfig{}))
		require.NoError(t, f.c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
		body := f.getOK(groupPath("s", "g"))
		require.Contains(t, body, "1 samples taken")
		for i := range 3 {
			_, err := f.c.Append(ctx, "s", rheo.Message{})
			require.NoError(t, err)
			f.clk.Advance(10 * time.Second)
			body = f.getOK(groupPath("s", "g"))
			require.Contains(t, body, fmt.Sprintf("%d samples taken", i+2))
		}
		require.Equal(t, 4, strings.Count(body, `<circle class="dot"`))
		require.Contains(t, body, "<title>3 at 2026-01-02 10:00:30 UTC</title>")
		// Views less than a second apart replace the last sample.
		f.getOK(groupPath("s", "g"))
		require.Contains(t, f.getOK(groupPath("s", "g")), "4 samples taken")
	})
}

func TestBackgroundSamplerRecordsAndStops(t *testing.T) {
	c := rheo.New(newBackend(t, "memory"))
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	d := dashboard.New(c, dashboard.WithSampleInterval(time.Millisecond))
	// Samples less than a second apart share a slot: three samples take
	// two seconds of wall time, nobody viewing any page.
	require.Eventually(t, func() bool { return dashboard.SampleCount(d, "s", "g") >= 3 }, time.Minute, 100*time.Millisecond)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is idempotent")
}

func TestDeadLettersArePagedWithCursors(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		ctx := context.Background()
		require.NoError(t, f.c.CreateStream(ctx, "s", rheo.StreamConfig{}))
		require.NoError(t, f.c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
		var ms []rheo.Message
		for i := range 25 {
			ms = append(ms, rheo.Message{ID: fmt.Sprintf("e%02d", i)})
		}
		_, err := f.c.AppendBatch(ctx, "s", ms)
		require.NoError(t, err)
		ls, err := f.c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 25})
		require.NoError(t, err)
		for _, l := range ls {
			require.NoError(t, f.c.Reject(ctx, l, "no"))
		}
		first := f.getOK(groupPath("s", "g"))
		require.Equal(t, 20, strings.Count(first, `<tr class="dl"`))
		require.Contains(t, first, `?after=e19">Next page`)
		second := f.getOK(groupPath("s", "g") + "?after=e19")
		require.Equal(t, 5, strings.Count(second, `<tr class="dl"`))
		require.Contains(t, second, `data-event="e20"`)
		require.NotContains(t, second, "Next page")
		status, body := f.get(groupPath("s", "g") + "?after=nope")
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, body, "not a dead letter")
	})
}

func TestUnknownStreamGroupOrEventIs404(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		for _, p := range []string{groupPath("nope", "billing"), groupPath("orders", "nope"),
			"/streams/orders/events/0/999", "/streams/nope/events/0/1", "/no/such/page"} {
			status, body := f.get(p)
			require.Equal(t, http.StatusNotFound, status, p)
			require.Contains(t, body, `<p class="error" id="error">`)
		}
		status, _ := f.get("/streams/orders/events/x/1")
		require.Equal(t, http.StatusBadRequest, status)
		status, _ = f.get("/streams/orders/events/7/1")
		require.Equal(t, http.StatusBadRequest, status, "partition out of range")
	})
}

// searchIDs returns the event IDs a search result page lists.
func searchIDs(body string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`/events/\d+/\d+">(ev-\d+)</a>`).FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func TestSearchFiltersWithTheQueryAPI(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		ctx := context.Background()
		cases := []struct {
			form url.Values
			q    rheo.Query
		}{
			{url.Values{"type": {"order.paid"}}, rheo.Query{Type: "order.paid"}},
			{url.Values{"key": {"cust-3"}}, rheo.Query{Key: "cust-3"}},
			{url.Values{"metadata": {"correlation_id=corr-2"}}, rheo.Query{Metadata: map[string]string{"correlation_id": "corr-2"}}},
			{url.Values{"payload": {"customer.country=DE\nn=9"}}, rheo.Query{Payload: map[string]any{"customer.country": "DE", "n": 9}}},
			{url.Values{"payload": {`customer.country="FR"`}, "type": {"order.created"}},
				rheo.Query{Type: "order.created", Payload: map[string]any{"customer.country": "FR"}}},
			{url.Values{"from": {"2026-01-02T10:05"}, "to": {"2026-01-02T10:09:00Z"}},
				rheo.Query{From: t0.Add(5 * time.Minute), To: t0.Add(9 * time.Minute)}},
		}
		for _, c := range cases {
			c.form.Set("stream", "orders")
			c.q.Stream = "orders"
			want, err := f.c.Query(ctx, c.q)
			require.NoError(t, err)
			require.NotEmpty(t, want, "%v", c.form)
			var wantIDs []string
			for _, e := range want {
				wantIDs = append(wantIDs, e.ID)
			}
			got := searchIDs(f.getOK("/events?" + c.form.Encode()))
			require.Equal(t, wantIDs, got, "%v", c.form)
		}
		require.Contains(t, f.getOK("/events?stream=orders&type=nothing"), "No events match.")
	})
}

func TestSearchPagesWithCursors(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		var all []string
		path := "/events?stream=orders&limit=7"
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			body := f.getOK(path)
			all = append(all, searchIDs(body)...)
			m := regexp.MustCompile(`<a href="/ops/rheo(/events\?[^"]+)">Next page`).FindStringSubmatch(body)
			if m == nil {
				break
			}
			path = htmlUnescape(m[1])
			require.Contains(t, path, "limit=7")
		}
		require.Len(t, all, 30)
		seen := map[string]bool{}
		for _, id := range all {
			require.False(t, seen[id], "event %s listed twice", id)
			seen[id] = true
		}
	})
}

func TestSearchBadInputIs400WithTheReason(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		for q, want := range map[string]string{
			"payload=nonsense":              "want one name=value per line",
			"from=yesterday":                "is not a time",
			"payload=a%20b%3D1":             "not allowed",
			"cursor=garbage":                "does not decode",
			"limit=0":                       "limit must be",
			"payload=x%3D%7B%22a%22%3A1%7D": "only strings, numbers",
		} {
			status, body := f.get("/events?stream=orders&" + q)
			require.Equal(t, http.StatusBadRequest, status, q)
			require.Contains(t, body, want, q)
		}
		status, _ := f.get("/events?stream=nope")
		require.Equal(t, http.StatusNotFound, status)
		require.Contains(t, f.getOK("/events"), `<option value="orders">orders</option>`)
	})
}

func TestEventPageShowsTheEventInEveryGroup(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		f.seed()
		ctx := context.Background()
		// Pick one event in each state of billing.
		dls, err := f.c.DeadLetters(ctx, "orders", "billing", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		leases, err := f.c.Leases(ctx, "orders", "billing", rheo.LeaseListOptions{})
		require.NoError(t, err)
		require.Len(t, leases, 2)
		lag, err := f.c.Lag(ctx, "orders", "billing")
		require.NoError(t, err)
		var below, pending *rheo.Event
		for _, p := range lag.Partitions {
			evs, err := f.c.Read(ctx, "orders", rheo.ReadOptions{Partition: p.Partition, Limit: 100})
			require.NoError(t, err)
			for _, e := range evs {
				if e.Sequence <= p.Frontier && !isDead(dls, e.ID) && below == nil {
					below = &e
				}
				if e.Sequence > p.Frontier && e.Sequence == p.HighWatermark && pending == nil {
					pending = &e
				}
			}
		}
		require.NotNil(t, below)
		require.NotNil(t, pending)
		state := func(e rheo.Event) string {
			body := f.getOK(fmt.Sprintf("/streams/orders/events/%d/%d", e.Partition, e.Sequence))
			require.Contains(t, body, "<code>"+e.ID+"</code>")
			i := strings.Index(body, `<tr data-group="billing">`)
			require.GreaterOrEqual(t, i, 0)
			m := regexp.MustCompile(`class="state state-[a-z-]+">([a-z -]+)<`).FindStringSubmatch(body[i:])
			require.NotNil(t, m)
			require.Contains(t, body, `<tr data-group="audit">`)
			return m[1]
		}
		require.Equal(t, "dead-lettered", state(dls[0].Event))
		require.Equal(t, "leased", state(rheo.Event{ID: leases[0].Event.ID, Partition: leases[0].Event.Partition, Sequence: leases[0].Event.Sequence}))
		require.Equal(t, "below frontier", state(*below))
		require.Equal(t, "pending", state(*pending))

		body := f.getOK(fmt.Sprintf("/streams/orders/events/%d/%d", below.Partition, below.Sequence))
		require.Contains(t, body, "&#34;customer&#34;: {\n    &#34;country&#34;: &#34;", "payload pretty-printed")
		require.Contains(t, body, "<th>correlation_id</th><td>corr-")
	})
}

func isDead(dls []rheo.DeadLetter, id string) bool {
	for _, d := range dls {
		if d.EventID == id {
			return true
		}
	}
	return false
}

func TestRedriveOneDeadLetterThroughThePage(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithWrites(true))
		f.seed()
		ctx := context.Background()
		dls, err := f.c.DeadLetters(ctx, "orders", "billing", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		page := f.getOK(groupPath("orders", "billing"))
		require.Contains(t, page, `<input type="hidden" name="event" value="`+dls[0].EventID+`">`)

		status, body := f.confirmAndPost(groupPath("orders", "billing")+"/redrive?event="+dls[0].EventID, nil)
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, "Reopened 1 dead letter.")
		after, err := f.c.DeadLetters(ctx, "orders", "billing", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		require.Len(t, after, 1)
		require.NotEqual(t, dls[0].EventID, after[0].EventID)
		require.Contains(t, f.logs.String(), "action=redrive")
		require.Contains(t, f.logs.String(), `result="Reopened 1 dead letter."`)
	})
}

func TestRedriveAllThroughThePage(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithWrites(true))
		f.seed()
		ctx := context.Background()
		require.Contains(t, f.getOK(groupPath("orders", "billing")+"/redrive"), "2 (all)")
		status, body := f.confirmAndPost(groupPath("orders", "billing")+"/redrive", nil)
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, "Reopened 2 dead letters.")
		info, err := f.c.GroupInfo(ctx, "orders", "billing")
		require.NoError(t, err)
		require.Zero(t, info.DeadLetters)
	})
}

func TestReplayThroughThePage(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithWrites(true))
		f.seed()
		ctx := context.Background()
		before, err := f.c.Lag(ctx, "orders", "billing")
		require.NoError(t, err)
		var want int64
		for _, p := range before.Partitions {
			want += p.HighWatermark
		}
		status, body := f.confirmAndPost(groupPath("orders", "billing")+"/replay?from_sequence=0", nil)
		require.Equal(t, http.StatusOK, status, body)
		// The seed's fetch offered 10 events; the other 20 were never
		// offered, and are pending anyway.
		require.Contains(t, body, "Reopened 10 deliveries.")
		after, err := f.c.Lag(ctx, "orders", "billing")
		require.NoError(t, err)
		require.Equal(t, want, after.Total)

		// From a time, once everything was consumed: the last 5 minutes' events.
		for {
			ls, err := f.c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 100})
			require.NoError(t, err)
			if len(ls) == 0 {
				break
			}
			require.NoError(t, f.c.AckBatch(ctx, ls))
		}
		status, body = f.confirmAndPost(groupPath("orders", "billing")+"/replay?from_time=2026-01-02T10:25:00Z", nil)
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, "Reopened 5 deliveries.")

		for q, want := range map[string]string{
			"":                                      "needs a sequence or a time",
			"?from_sequence=-1":                     "want a sequence number",
			"?from_sequence=1&from_time=2026-01-01": "not both",
		} {
			status, body := f.get(groupPath("orders", "billing") + "/replay" + q)
			require.Equal(t, http.StatusBadRequest, status, q)
			require.Contains(t, body, want)
		}
	})
}

func TestResetRequiresTheGroupNameTyped(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithWrites(true))
		f.seed()
		ctx := context.Background()
		before, err := f.c.GroupInfo(ctx, "orders", "billing")
		require.NoError(t, err)
		status, body := f.confirmAndPost(groupPath("orders", "billing")+"/reset?start=latest", url.Values{"confirm_name": {"bill"}})
		require.Equal(t, http.StatusBadRequest, status)
		require.Contains(t, body, "does not match the group name; nothing was reset")
		same, err := f.c.GroupInfo(ctx, "orders", "billing")
		require.NoError(t, err)
		require.Equal(t, before.DeadLetters, same.DeadLetters)
		require.Equal(t, before.Lag.Total, same.Lag.Total)

		status, body = f.confirmAndPost(groupPath("orders", "billing")+"/reset?start=latest", url.Values{"confirm_name": {"billing"}})
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, "The group restarted at latest; reopened 0 deliveries; 0 deliveries are now pending.")
		require.Contains(t, body, "<th>Dead letters forgotten</th><td>2</td>")
		info, err := f.c.GroupInfo(ctx, "orders", "billing")
		require.NoError(t, err)
		require.Zero(t, info.Lag.Total)
		require.Zero(t, info.DeadLetters)
		require.Contains(t, f.logs.String(), "action=reset")
	})
}

func TestReadOnlyRefusesEveryWriteServerSide(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind) // writes off by default
		f.seed()
		ctx := context.Background()
		page := f.getOK(groupPath("orders", "billing"))
		require.NotContains(t, page, "Redrive")
		require.NotContains(t, page, "Reset…")
		for _, a := range []string{"redrive", "replay?from_sequence=0", "reset"} {
			status, body := f.get(groupPath("orders", "billing") + "/" + a)
			require.Equal(t, http.StatusForbidden, status, a)
			require.Contains(t, body, "read-only")
		}
		// A crafted POST, with a session and a token of the right shape.
		for _, form := range []url.Values{
			{"event": {"ev-00"}}, {"from_sequence": {"0"}}, {"confirm_name": {"billing"}, "start": {"latest"}},
		} {
			form.Set("csrf", "x")
			for _, a := range []string{"redrive", "replay", "reset"} {
				status, _ := f.post(groupPath("orders", "billing")+"/"+a, form)
				require.Equal(t, http.StatusForbidden, status, a)
			}
		}
		info, err := f.c.GroupInfo(ctx, "orders", "billing")
		require.NoError(t, err)
		require.EqualValues(t, 2, info.DeadLetters)
		require.Contains(t, f.logs.String(), "write refused (read-only)")
	})
}

func TestWritesNeedTheSessionsCSRFToken(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithWrites(true))
		f.seed()
		ctx := context.Background()
		path := groupPath("orders", "billing") + "/redrive"
		// No token, no session.
		status, body := f.post(path, url.Values{})
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, body, "security token")
		// A token from another session (another browser).
		other := newFixtureClient(t, f)
		token := csrfRE.FindStringSubmatch(other.getOK(path))[1]
		f.getOK(path) // this browser's session
		status, _ = f.post(path, url.Values{"csrf": {token}})
		require.Equal(t, http.StatusForbidden, status)
		// Its own token works.
		status, _ = f.confirmAndPost(path, nil)
		require.Equal(t, http.StatusOK, status)
		info, err := f.c.GroupInfo(ctx, "orders", "billing")
		require.NoError(t, err)
		require.Zero(t, info.DeadLetters)
	})
}

// newFixtureClient is a second browser (its own cookie jar) on f's server.
func newFixtureClient(t *testing.T, f *fixture) *fixture {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	g := *f
	g.http = &http.Client{Jar: jar}
	return &g
}

func TestSessionCookieIsStrict(t *testing.T) {
	f := newFixture(t, "memory", dashboard.WithWrites(true))
	f.seed()
	resp, err := http.Get(f.srv.URL + f.prefix + groupPath("orders", "billing"))
	require.NoError(t, err)
	resp.Body.Close()
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	require.Equal(t, "/ops/rheo/", cookies[0].Path)
}

func TestStoredStringsAreEscapedAndScriptsForbidden(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind, dashboard.WithWrites(true))
		ctx := context.Background()
		const evil = `<img src=x onerror=alert(1)><script>alert(2)</script>"'`
		stream, group := "s"+evil, "g"+evil
		require.NoError(t, f.c.CreateStream(ctx, stream, rheo.StreamConfig{}))
		require.NoError(t, f.c.CreateGroup(ctx, stream, group, rheo.GroupConfig{}))
		p, _ := json.Marshal(map[string]string{"html": evil})
		e, err := f.c.Append(ctx, stream, rheo.Message{ID: "id" + evil, Type: "t" + evil, Key: "k" + evil,
			Payload: p, Metadata: map[string]string{"m" + evil: "v" + evil}})
		require.NoError(t, err)
		ls, err := f.c.Fetch(ctx, stream, group, rheo.FetchOptions{ConsumerID: "c" + evil})
		require.NoError(t, err)
		require.NoError(t, f.c.Reject(ctx, ls[0], "r"+evil))

		pages := []string{"/", groupPath(stream, group), fmt.Sprintf("/streams/%s/events/%d/%d", url.PathEscape(stream), e.Partition, e.Sequence),
			"/events?stream=" + url.QueryEscape(stream), groupPath(stream, group) + "/redrive?event=" + url.QueryEscape(e.ID),
			groupPath(stream, group) + "/reset"}
		for _, path := range pages {
			resp, err := f.http.Get(f.srv.URL + f.prefix + path)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body := string(b)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
			require.NotContains(t, body, "<img", path)
			require.NotContains(t, body, "<script>", path)
			require.Contains(t, body, "&lt;script&gt;alert(2)&lt;/script&gt;", path)
			csp := resp.Header.Get("Content-Security-Policy")
			require.Contains(t, csp, "script-src 'self'")
			require.NotContains(t, csp, "unsafe-inline")
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		}
		require.NotContains(t, f.getOK("/"), " style=", "no inline styles: the CSP forbids them")
	})
}

func TestAssetsAreEmbeddedAndLinksFollowTheMountPrefix(t *testing.T) {
	f := newFixture(t, "memory")
	f.seed()
	body := f.getOK("/")
	require.Contains(t, body, `href="/ops/rheo/static/dashboard.css"`)
	require.Contains(t, body, `src="/ops/rheo/static/live.js"`)
	require.Contains(t, body, `data-refresh="5"`)
	require.Contains(t, f.getOK("/static/dashboard.css"), ".status-healthy")
	require.Contains(t, f.getOK("/static/live.js"), "DOMParser")
	require.NotContains(t, f.getOK("/events"), "live.js", "only the overview and group pages refresh")

	// Mounted at the root, links have no prefix.
	d := dashboard.New(f.c, dashboard.WithSampleInterval(0), dashboard.WithRefresh(0))
	defer d.Close()
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	require.Contains(t, rec.Body.String(), `href="/streams/orders/groups/billing"`)
	require.NotContains(t, rec.Body.String(), "live.js", "refresh disabled")
}

func TestNoOpenRedirects(t *testing.T) {
	f := newFixture(t, "memory", dashboard.WithWrites(true))
	f.seed()
	for _, p := range []string{"//evil.example/", "/events?next=https://evil.example", "/static/../../etc/passwd"} {
		resp, err := f.http.Get(f.srv.URL + f.prefix + p)
		require.NoError(t, err)
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		require.False(t, strings.HasPrefix(loc, "//") || strings.Contains(loc, "://"), "%s redirected off site, to %s", p, loc)
	}
	status, body := f.confirmAndPost(groupPath("orders", "billing")+"/redrive", url.Values{"next": {"https://evil.example"}})
	require.Equal(t, http.StatusOK, status, "actions answer with a page, never a redirect")
	require.NotContains(t, body, "evil.example")
}

func TestTrimmedEventsAreNotCounted(t *testing.T) {
	forStores(t, localStores, func(t *testing.T, kind string) {
		f := newFixture(t, kind)
		ctx := context.Background()
		require.NoError(t, f.c.CreateStream(ctx, "s", rheo.StreamConfig{}))
		var ms []rheo.Message
		for range 30 {
			ms = append(ms, rheo.Message{})
		}
		_, err := f.c.AppendBatch(ctx, "s", ms)
		require.NoError(t, err)
		_, err = f.c.Trim(ctx, "s", rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 20}})
		require.NoError(t, err)
		require.Contains(t, f.getOK("/"), "1 partition · 20 events")
		status, body := f.get("/streams/s/events/0/5")
		require.Equal(t, http.StatusNotFound, status)
		require.Contains(t, body, "or trimmed")
		require.Contains(t, f.getOK("/streams/s/events/0/11"), "<td>11</td>")
	})
}
