package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo/dashboard"
	"github.com/rheo-go/rheo/exporter"
)

func (a *app) dashboardCommand() *cobra.Command {
	var (
		addr, token string
		writes      bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard: group health, event search, dead letters",
		Long: `dashboard serves a web page over the store: every group's health (lag,
leases, dead letters, a lag chart), event search, each event's state in every
group, and, with --allow-writes, redrive, replay and reset behind confirmation
pages.

It listens on 127.0.0.1:8080 unless told otherwise. The page shows every
payload: give --auth-token (or RHEO_DASHBOARD_TOKEN) before listening
anywhere else. Browsers then ask for a user name and password: any user
name, the token as the password. Scripts send "Authorization: Bearer TOKEN".`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = a.getenv("RHEO_DASHBOARD_TOKEN")
			}
			if err := checkListenAddr(addr); err != nil {
				return err
			}
			if err := a.requireLastingStore(cmd.Name()); err != nil {
				return err
			}
			if err := a.requireExistingStore(); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := a.client(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			logger := slog.New(slog.NewTextHandler(a.stderr, nil))
			d := dashboard.New(c, dashboard.WithWrites(writes), dashboard.WithLogger(logger))
			defer d.Close()

			mux := http.NewServeMux()
			mux.Handle("/", d)
			// The group-health series of `rheo metrics`, behind the same token.
			mux.Handle("GET /metrics", exporter.Handler(c, exporter.Options{}))

			var h http.Handler = mux
			if token != "" {
				h = requireToken(token, h)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("dashboard: listen on %s: %w (choose another --addr)", addr, err)
			}
			mode := "read-only"
			if writes {
				mode = "writes enabled"
			}
			fmt.Fprintf(a.stdout, "rheo dashboard: serving http://%s/ on %s (%s)\n", ln.Addr(), redact(a.storeDSN()), mode)
			if token == "" && !loopback(ln.Addr()) {
				logger.Warn("dashboard: listening beyond loopback without --auth-token: anyone who can reach " +
					ln.Addr().String() + " can read every payload")
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			select {
			case err := <-served:
				return fmt.Errorf("dashboard: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("dashboard: shutdown: %w", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	f.BoolVar(&writes, "allow-writes", false, "enable redrive, replay and reset (read-only otherwise)")
	f.StringVar(&token, "auth-token", "", "require this token (bearer, or basic-auth password); default $RHEO_DASHBOARD_TOKEN")
	return cmd
}

// requireToken lets through requests that carry the token as a bearer token
// or as the password of basic auth, and asks browsers for it otherwise.
func requireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	ok := func(got string) bool {
		h := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(h[:], want[:]) == 1
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bearer, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(bearer) {
			next.ServeHTTP(w, r)
			return
		}
		if _, pass, found := r.BasicAuth(); found && ok(pass) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="rheo dashboard", charset="UTF-8"`)
		http.Error(w, "401 unauthorized: this dashboard needs its token (any user name, the token as password)", http.StatusUnauthorized)
	})
}

func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
