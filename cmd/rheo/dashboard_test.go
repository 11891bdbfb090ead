package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// startDashboard runs `rheo dashboard` on a free loopback port and returns
// its base URL; the command stops when the test ends.
func startDashboard(t *testing.T, c *cli, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := c.start(ctx, out, errOut, append([]string{"dashboard", "--addr", "127.0.0.1:0"}, args...)...)
	t.Cleanup(func() {
		cancel()
		require.Equal(t, exitOK, c.exited(done, "dashboard did not stop"), errOut.String())
	})
	re := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)/`)
	var base string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, time.Minute, 20*time.Millisecond, "dashboard did not start: %s", errOut.String())
	return base, errOut
}

func fetch(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestDashboardServesTheStore(t *testing.T) {
	c := memoryCLI(t)
	ctx := context.Background()
	cl := c.client()
	require.NoError(t, cl.CreateStream(ctx, "orders", rheo.StreamConfig{}))
	require.NoError(t, cl.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))
	base, _ := startDashboard(t, c)
	req, _ := http.NewRequest("GET", base+"/", nil)
	status, body := fetch(t, req)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "billing")
	require.Contains(t, body, "read-only")
	req, _ = http.NewRequest("POST", base+"/streams/orders/groups/billing/redrive", nil)
	status, _ = fetch(t, req)
	require.Equal(t, http.StatusForbidden, status, "read-only unless --allow-writes")
}

func TestDashboardAllowWritesEnablesActions(t *testing.T) {
	c := memoryCLI(t)
	ctx := context.Background()
	cl := c.client()
	require.NoError(t, cl.CreateStream(ctx, "orders", rheo.StreamConfig{}))
	require.NoError(t, cl.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))
	base, _ := startDashboard(t, c, "--allow-writes")
	req, _ := http.NewRequest("GET", base+"/streams/orders/groups/billing/redrive", nil)
	status, body := fetch(t, req)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `name="csrf"`)
}

func TestDashboardAuthToken(t *testing.T) {
	c := memoryCLI(t)
	base, _ := startDashboard(t, c, "--auth-token", "s3cret")
	req, _ := http.NewRequest("GET", base+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")

	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
		func(r *http.Request) { r.SetBasicAuth("anyone", "s3cret") },
	} {
		req, _ := http.NewRequest("GET", base+"/static/dashboard.css", nil)
		set(req)
		status, _ := fetch(t, req)
		require.Equal(t, http.StatusOK, status)
	}
	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") },
		func(r *http.Request) { r.SetBasicAuth("s3cret", "wrong") },
	} {
		req, _ := http.NewRequest("GET", base+"/", nil)
		set(req)
		status, _ := fetch(t, req)
		require.Equal(t, http.StatusUnauthorized, status)
	}
}

func TestDashboardBadAddressIsAClearError(t *testing.T) {
	c := memoryCLI(t)
	r := c.run("dashboard", "--addr", "256.0.0.1:99999")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.err, "listen on 256.0.0.1:99999")
	require.Contains(t, r.err, "--addr")
}
