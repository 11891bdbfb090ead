package browsertest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/dashboard"
)

var screenshots = flag.Bool("screenshots", false, "write the screenshots to docs/img (default: a temporary directory)")

// t0 is when the scene starts; the clock is frozen so that screenshots
// are the same from run to run.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// browserPath finds Chromium: RHEO_TEST_CHROME, else the PATH.
func browserPath() (string, bool) {
	if p := os.Getenv("RHEO_TEST_CHROME"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// One browser serves every test (each in its own tab): starting Chromium
// is the slowest step by far on a loaded machine.
var (
	browserOnce  sync.Once
	browserCtx   context.Context
	browserErr   error
	browserClose = func() {}
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	browserClose()
	for _, s := range scenes {
		s.close()
	}
	os.Exit(code)
}

// newTab returns a new tab of the shared browser, closed with the test.
// Without a browser the test skips, and fails under CI=true.
func newTab(t *testing.T) context.Context {
	t.Helper()
	path, ok := browserPath()
	if !ok {
		msg := "no Chromium found (install the chromium package or set RHEO_TEST_CHROME)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	browserOnce.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.NoSandbox, // containers run as root
			chromedp.DisableGPU,
			chromedp.WindowSize(1280, 900),
			chromedp.Flag("hide-scrollbars", true),
		)
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		browserClose = func() { cancelBrowser(); cancelAlloc() }
		start := time.Now()
		browserErr = chromedp.Do(bctx)
		t.Logf("browser started in %v", time.Since(start))
		browserCtx = bctx
	})
	require.NoError(t, browserErr, "starting %s", path)
	ctx, cancelTab := chromedp.NewContext(browserCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
	})
	return ctx
}

// scene is a store with a realistic mix of groups and a dashboard over it.
type scene struct {
	c     *rheo.Client
	clk   *clock.Frozen
	url   string // the dashboard's base URL (mounted under /rheo)
	close func()
}

// scenes are built once per kind and shared by the tests that ask for the
// same kind; TestMain closes them.
var (
	scenesMu sync.Mutex
	scenes   = map[string]*scene{}
)

// sharedScene returns the scene of the given kind: "read-only" (no
// writes, no refresh), "writes" (actions enabled) or "live" (refresh every
// second).
func sharedScene(t *testing.T, kind string) *scene {
	t.Helper()
	scenesMu.Lock()
	defer scenesMu.Unlock()
	if s := scenes[kind]; s != nil {
		return s
	}
	var opts []dashboard.Option
	switch kind {
	case "writes":
		opts = append(opts, dashboard.WithWrites(true))
	case "live":
		opts = append(opts, dashboard.WithRefresh(time.Second))
	}
	s := newScene(t, opts...)
	scenes[kind] = s
	return s
}

func newScene(t *testing.T, opts ...dashboard.Option) *scene {
	t.Helper()
	clk := clock.NewFrozen(t0)
	c := rheo.New(memory.New(), rheo.WithClock(clk))
	opts = append([]dashboard.Option{
		dashboard.WithClock(clk), dashboard.WithSampleInterval(0), dashboard.WithRefresh(0),
		dashboard.WithStuckAfter(2 * time.Minute), dashboard.WithBehindAfter(time.Minute),
	}, opts...)
	d := dashboard.New(c, opts...)
	mux := http.NewServeMux()
	mux.Handle("/rheo/", http.StripPrefix("/rheo", d))
	srv := httptest.NewServer(mux)
	s := &scene{c: c, clk: clk, url: srv.URL + "/rheo", close: func() {
		srv.Close()
		_ = d.Close()
		_ = c.Close()
	}}
	start := time.Now()
	s.build(t)
	t.Logf("scene built in %v", time.Since(start))
	return s
}

// must returns v, or stops the test (through the panic the testing
// package reports) when err is set: setup calls read in one line.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// build creates three streams and five groups in the four states, and lets
// the dashboard watch five minutes of work so that the lag chart has a
// history (each page view is a sample).
func (s *scene) build(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 4}))
	require.NoError(t, s.c.CreateStream(ctx, "payments", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, s.c.CreateStream(ctx, "emails", rheo.StreamConfig{}))
	for _, g := range [][2]string{{"orders", "billing"}, {"orders", "shipping"}, {"orders", "analytics"}, {"payments", "ledger"}, {"emails", "sender"}} {
		require.NoError(t, s.c.CreateGroup(ctx, g[0], g[1], rheo.GroupConfig{MaxAttempts: 3}))
	}
	countries := []string{"FR", "DE", "NL", "ES", "IT"}
	n := 0
	appendOrders := func(k int) {
		var ms []rheo.Message
		for range k {
			ms = append(ms, rheo.Message{
				ID: fmt.Sprintf("ord-%05d", n), Type: []string{"order.created", "order.paid", "order.shipped"}[n%3],
				Key:      fmt.Sprintf("customer-%d", n%17),
				Payload:  json.RawMessage(fmt.Sprintf(`{"order_id":"ord-%05d","amount_cents":%d,"currency":"EUR","customer":{"id":"customer-%d","country":%q},"lines":[{"sku":"SKU-%d","qty":%d}]}`, n, 1000+n*37%9000, n%17, countries[n%5], n%40, 1+n%3)),
				Metadata: map[string]string{"correlation_id": fmt.Sprintf("req-%04x", n*7919%65536), "producer": "checkout-api", "schema_version": "3"},
			})
			n++
		}
		must(s.c.AppendBatch(ctx, "orders", ms))
	}
	consume := func(stream, group string, k int, reject func(rheo.Lease) string) {
		ls := must(s.c.Fetch(ctx, stream, group, rheo.FetchOptions{Limit: k, ConsumerID: group + "-worker-1", LeaseDuration: 45 * time.Second}))
		for _, l := range ls {
			if reject != nil {
				if why := reject(l); why != "" {
					require.NoError(t, s.c.Reject(ctx, l, why))
					continue
				}
			}
			require.NoError(t, s.c.Ack(ctx, l))
		}
	}
	for i := range 30 {
		appendOrders(12)
		must(s.c.Append(ctx, "payments", rheo.Message{Type: "payment.captured", Key: fmt.Sprintf("customer-%d", i%17),
			Payload: json.RawMessage(fmt.Sprintf(`{"amount_cents":%d}`, 500+i))}))
		if i < 20 {
			must(s.c.Append(ctx, "emails", rheo.Message{Type: "email.requested", Payload: json.RawMessage(`{"template":"receipt"}`)}))
		}
		// billing keeps up but gives up on some orders; shipping keeps up;
		// analytics falls behind; sender stops after two minutes.
		billing := 8 // falls behind for two and a half minutes, then catches up
		if i >= 15 {
			billing = 16
		}
		consume("orders", "billing", billing, func(l rheo.Lease) string {
			if l.Event.Sequence%41 == 0 {
				return "payment provider: card declined (code 51)"
			}
			return ""
		})
		consume("orders", "shipping", 12, nil)
		consume("orders", "analytics", 5, nil)
		consume("payments", "ledger", 1, nil)
		if i < 8 {
			consume("emails", "sender", 1, nil)
		}
		s.clk.Advance(10 * time.Second)
		for _, g := range [][2]string{{"orders", "billing"}, {"orders", "analytics"}} {
			resp, err := http.Get(s.url + "/streams/" + g[0] + "/groups/" + g[1])
			require.NoError(t, err)
			resp.Body.Close()
		}
		resp, err := http.Get(s.url + "/")
		require.NoError(t, err)
		resp.Body.Close()
	}
	// New orders, two of them leased, for the screenshot of billing.
	appendOrders(6)
	must(s.c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 2, ConsumerID: "billing-worker-2", LeaseDuration: 45 * time.Second}))
	s.clk.Advance(5 * time.Second)
}

// shoot saves a full-page PNG screenshot as name.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.Greater(t, len(png), 1000)
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "..", "docs", "img")
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
}

// noDialogs fails the test if the page ever opens an alert, confirm or prompt.
func noDialogs(t *testing.T, ctx context.Context) *atomic.Int32 {
	var n atomic.Int32
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			n.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return &n
}

func number(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 10, 64)
	require.NoError(t, err, "%q is not a number", s)
	return n
}

// text returns the visible text of the first element matching sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, "text of %s", sel)
	return s
}

func eval[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	require.NoError(t, err, expr)
	return v
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// rawJSON encodes v without escaping <, > and &, as most producers do.
func rawJSON(v any) json.RawMessage {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	must(0, enc.Encode(v))
	return json.RawMessage(b.String())
}

func TestOverviewLinksToTheGroupAndItsLagIsTheAPIs(t *testing.T) {
	s := sharedScene(t, "read-only")
	ctx := newTab(t)
	do(t, ctx, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-group="billing"]`)))
	require.Equal(t, "stuck", text(t, ctx, `tr[data-group="sender"] .status`))
	require.Equal(t, "behind", text(t, ctx, `tr[data-group="analytics"] .status`))
	require.Equal(t, "dead letters", text(t, ctx, `tr[data-group="billing"] .status`))
	require.Equal(t, "healthy", text(t, ctx, `tr[data-group="shipping"] .status`))
	shoot(t, ctx, "dashboard-overview.png")

	do(t, ctx, chromedp.Click(chromedp.CSS(`tr[data-group="billing"] a`)), chromedp.WaitVisible(chromedp.ID("lag-total")))
	require.Contains(t, text(t, ctx, "h1"), "billing")
	lag := must(s.c.Lag(context.Background(), "orders", "billing"))
	require.Equal(t, lag.Total, number(t, text(t, ctx, "#lag-total")))
	shoot(t, ctx, "dashboard-group.png")
}

func TestEventPageShowsPayloadAndStates(t *testing.T) {
	s := sharedScene(t, "read-only")
	ctx := newTab(t)
	dls := must(s.c.DeadLetters(context.Background(), "orders", "billing", rheo.DeadLetterOptions{Limit: 1}))
	require.Len(t, dls, 1)
	do(t, ctx,
		chromedp.Navigate(s.url+"/streams/orders/groups/billing"),
		chromedp.Click(chromedp.CSS(`tr.dl a`)),
		chromedp.WaitVisible(chromedp.ID("payload")),
	)
	payload := text(t, ctx, "#payload")
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(payload), &got), payload)
	require.Equal(t, dls[0].EventID, got["order_id"])
	require.Equal(t, "dead-lettered", text(t, ctx, `tr[data-group="billing"] .state`))
	require.Equal(t, "below frontier", text(t, ctx, `tr[data-group="shipping"] .state`))
	shoot(t, ctx, "dashboard-event.png")
}

func TestRedriveThroughThePageMakesTheDeadLetterAvailable(t *testing.T) {
	s := sharedScene(t, "writes")
	ctx := newTab(t)
	bg := context.Background()
	dls := must(s.c.DeadLetters(bg, "orders", "billing", rheo.DeadLetterOptions{}))
	require.NotEmpty(t, dls)
	target := dls[0].EventID
	do(t, ctx,
		chromedp.Navigate(s.url+"/streams/orders/groups/billing"),
		chromedp.Click(chromedp.CSS(`tr.dl[data-event="`+target+`"] button`)),
		chromedp.WaitVisible(chromedp.ID("confirm")),
	)
	shoot(t, ctx, "dashboard-confirm.png")
	do(t, ctx, chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("result")))
	require.Equal(t, "Reopened 1 dead letter.", text(t, ctx, "#result"))
	after := must(s.c.DeadLetters(bg, "orders", "billing", rheo.DeadLetterOptions{}))
	require.Len(t, after, len(dls)-1)
	// Available again: the group delivers it to a fetch, attempts reset.
	found := false
	for range 100 {
		ls := must(s.c.Fetch(bg, "orders", "billing", rheo.FetchOptions{Limit: 100}))
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			if l.Event.ID == target {
				found = true
				require.Equal(t, 1, l.Attempt, "attempts reset")
			}
			require.NoError(t, s.c.Ack(bg, l))
		}
	}
	require.True(t, found, "redriven dead letter %s was not delivered again", target)
}

func TestReadOnlyDashboardRefusesTheRedrive(t *testing.T) {
	s := sharedScene(t, "read-only")
	ctx := newTab(t)
	bg := context.Background()
	dls := must(s.c.DeadLetters(bg, "orders", "billing", rheo.DeadLetterOptions{}))
	do(t, ctx, chromedp.Navigate(s.url+"/streams/orders/groups/billing"), chromedp.WaitVisible(chromedp.CSS(`tr.dl`)))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll("main button, main form[method=post]").length`), "a read-only page offers no action")
	do(t, ctx, chromedp.Navigate(s.url+"/streams/orders/groups/billing/redrive?event="+dls[0].EventID))
	require.Contains(t, text(t, ctx, "#error"), "read-only")
	// A crafted POST from the page itself.
	status := eval[int](t, ctx, `fetch(location.pathname, {method: "POST", body: new URLSearchParams({event: "`+dls[0].EventID+`", csrf: "x"})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise)
	require.Equal(t, http.StatusForbidden, status)
	require.Len(t, must(s.c.DeadLetters(bg, "orders", "billing", rheo.DeadLetterOptions{})), len(dls))
}

func TestHostilePayloadAndReasonStayText(t *testing.T) {
	s := sharedScene(t, "writes")
	ctx := newTab(t)
	dialogs := noDialogs(t, ctx)
	bg := context.Background()
	const img = `<img src=x onerror="window.__xss=1;alert(1)">`
	const script = `<script>window.__xss=2;alert(2)</script>`
	require.NoError(t, s.c.CreateGroup(bg, "emails", "audit", rheo.GroupConfig{}))
	e := must(s.c.Append(bg, "emails", rheo.Message{ID: "evil-1", Type: "x" + script, Key: img,
		Payload:  rawJSON(map[string]string{"html": img + script}),
		Metadata: map[string]string{"note": script + img}}))
	ls := must(s.c.Fetch(bg, "emails", "audit", rheo.FetchOptions{Limit: 100}))
	for _, l := range ls {
		if l.Event.ID == e.ID {
			require.NoError(t, s.c.Reject(bg, l, "renderer crashed on "+img+script))
		} else {
			require.NoError(t, s.c.Ack(bg, l))
		}
	}
	noScript := func(where string) {
		require.Zero(t, eval[int](t, ctx, `document.querySelectorAll("main img").length`), where)
		require.Zero(t, eval[int](t, ctx, `document.querySelectorAll("script").length`), where+": refresh is off in this scene")
		require.Zero(t, eval[int](t, ctx, `window.__xss === undefined ? 0 : window.__xss`), where)
	}
	do(t, ctx, chromedp.Navigate(s.url+"/streams/emails/groups/audit"), chromedp.WaitVisible(chromedp.CSS(`td.reason`)))
	require.Equal(t, "renderer crashed on "+img+script, text(t, ctx, "td.reason"))
	noScript("group page")
	do(t, ctx, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-group="audit"]`)))
	noScript("overview")
	do(t, ctx, chromedp.Navigate(s.url+"/events?stream=emails&type="+strings.ReplaceAll("x"+script, " ", "+")), chromedp.WaitVisible(chromedp.CSS("table.events")))
	noScript("search")
	do(t, ctx, chromedp.Navigate(s.url+fmt.Sprintf("/streams/emails/events/%d/%d", e.Partition, e.Sequence)), chromedp.WaitVisible(chromedp.ID("payload")))
	noScript("event page")
	var shown map[string]string
	require.NoError(t, json.Unmarshal([]byte(text(t, ctx, "#payload")), &shown))
	require.Equal(t, img+script, shown["html"], "the payload reads as it was stored")
	require.Equal(t, script+img, text(t, ctx, "table.kv:not(.props) td"))
	require.Zero(t, dialogs.Load(), "a script ran and opened a dialog")
}

func TestOverviewRefreshesLive(t *testing.T) {
	s := sharedScene(t, "live")
	ctx := newTab(t)
	do(t, ctx, chromedp.Navigate(s.url+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-group="ledger"]`)))
	before := number(t, text(t, ctx, `tr[data-group="ledger"] .lag`))
	must(s.c.Append(context.Background(), "payments", rheo.Message{Type: "payment.captured"}))
	want := strconv.FormatInt(before+1, 10)
	// The page is not navigated again: live.js swaps the new content in.
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelector('tr[data-group="ledger"] .lag').textContent === "`+want+`"`,
		chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err)
}
