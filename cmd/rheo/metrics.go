package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/exporter"
)

// defaultMetricsAddr is where `rheo metrics` listens unless --addr says
// otherwise (the port OpenTelemetry's Prometheus exporter uses by default).
const defaultMetricsAddr = "127.0.0.1:9464"

func (a *app) metricsCommand() *cobra.Command {
	var addr string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "metrics",
		Short: "Serve the health of every stream and group to Prometheus",
		Long: `Serve /metrics in the Prometheus exposition format with the health of every
stream and consumer group of the store, read at each scrape (one GroupInfo per
group, never a scan of events): rheo_group_lag{stream,group,partition},
rheo_group_inflight, rheo_group_available, rheo_group_dead_letters and
rheo_group_oldest_pending_age_seconds{stream,group}, and
rheo_stream_high_watermark{stream,partition}.

/healthz answers 200 when the store answers a ping, 503 otherwise.
See docs/observability.md for the series and alert examples.`,
		Example: "  rheo metrics --dsn postgres://rheo@db/rheo --addr 0.0.0.0:9464",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usagef("--scrape-timeout must be positive, got %v", timeout)
			}
			if err := checkListenAddr(addr); err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *rheo.Client) error {
				return a.serveMetrics(ctx, c, addr, timeout)
			})
		}),
	}
	cmd.Flags().StringVar(&addr, "addr", defaultMetricsAddr, "address to listen on")
	cmd.Flags().DurationVar(&timeout, "scrape-timeout", exporter.DefaultTimeout, "longest a scrape may read the store")
	return cmd
}

// serveMetrics serves /metrics and /healthz until ctx ends.
func (a *app) serveMetrics(ctx context.Context, c *rheo.Client, addr string, timeout time.Duration) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", exporter.Handler(c, exporter.Options{Timeout: timeout}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := c.Ping(pctx); err != nil {
			http.Error(w, "store unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stdout, "serving http://%s/metrics and /healthz\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkListenAddr refuses an --addr that is not host:port before anything
// opens: a usage error.
func checkListenAddr(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return usagef("--addr %q: want host:port, such as 127.0.0.1:8080 or :9464", addr)
	}
	return nil
}
