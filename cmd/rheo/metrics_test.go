package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// `rheo metrics` serves the group health of the store on /metrics, answers
// /healthz, and stops cleanly on cancellation.
func TestMetricsServesGroupHealth(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "orders", "--partitions", "2")
	c.ok("create-group", "orders", "billing")
	c.okStdin(`{"key":"a","payload":{"n":1}}`+"\n"+`{"key":"b","payload":{"n":2}}`+"\n", "append", "orders")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := c.start(ctx, &out, &errOut, "metrics", "--addr", "127.0.0.1:0")
	addr := regexp.MustCompile(`http://(\S+)/metrics`)
	deadline := time.Now().Add(30 * time.Second)
	for addr.FindStringSubmatch(out.String()) == nil {
		select {
		case code := <-done:
			t.Fatalf("rheo metrics exited %d: %s", code, errOut.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "rheo metrics never said where it listens")
		time.Sleep(10 * time.Millisecond)
	}
	base := "http://" + addr.FindStringSubmatch(out.String())[1]

	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok\n", string(body))

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	total := 0.0
	for _, m := range fams["rheo_group_lag"].GetMetric() {
		total += m.GetGauge().GetValue()
	}
	require.Equal(t, 2.0, total)
	require.Len(t, fams["rheo_stream_high_watermark"].GetMetric(), 2)
	require.Len(t, fams["rheo_group_available"].GetMetric(), 1)
	require.Equal(t, 2.0, fams["rheo_group_available"].GetMetric()[0].GetGauge().GetValue())

	cancel()
	require.Equal(t, exitOK, c.exited(done, "rheo metrics did not stop"), errOut.String())
}

// An --addr the system cannot listen on is reported on one line with exit
// 1; one that is not host:port is a usage error (exit 2), before anything
// opens.
func TestMetricsBadAddr(t *testing.T) {
	c := newCLI(t)
	c.ok("create-stream", "s")
	r := c.run("metrics", "--addr", "256.0.0.1:x")
	require.Equal(t, exitError, r.code)
	require.True(t, strings.HasPrefix(r.err, "rheo: listen on 256.0.0.1:x"), r.err)

	for _, cmd := range []string{"metrics", "dashboard"} {
		r = c.run(cmd, "--addr", "bogus")
		require.Equal(t, exitUsage, r.code, r.err)
		require.Contains(t, r.err, `--addr "bogus": want host:port`)
	}
}
