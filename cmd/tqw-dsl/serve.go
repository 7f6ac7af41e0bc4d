package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/metrics"
	"github.com/tqw-dsl/tqw/server/ui"
)

func init() { commands = append(commands, newServeCmd) }

// apiTokenEnv holds the HTTP API's bearer token (serve, and the commands
// that reach a serving writer over HTTP).
const apiTokenEnv = "TQW_API_TOKEN"

// defaultServeAddr is where serve listens by default: loopback only.
const defaultServeAddr = "127.0.0.1:7700"

func newServeCmd() *cobra.Command {
	var (
		addr, store, workflows, tokenFile, hooksFile string
		noShell                                      bool
		concurrency                                  int
		inboxPoll, retention                         time.Duration
		hookMaxBody                                  int64
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Work every run in the store, as worker does, and serve the HTTP API (docs/API.md)",
		Long: `serve is worker plus an HTTP server: it takes the store's writer lease and
works every run as worker does, applies the inbox's commands, and serves the
HTTP API at --addr (JSON under /v1, docs/API.md; the OpenAPI document at
/v1/openapi.json; /healthz and /readyz), the web UI at / (docs/UI.md) and
Prometheus metrics at /metrics. Its lease advertises the address,
so signal, cancel, submit, status, list and history on other processes reach
it over HTTP instead of the store's inbox.

With a token (the environment variable ` + apiTokenEnv + ` or --token-file) every
endpoint except /healthz, /readyz, /metrics and the webhooks requires
"Authorization: Bearer <token>"; without one, serve refuses to listen on
anything but loopback. Webhooks (--hooks FILE, docs/API.md) start runs or
deliver signals from signed requests.

On SIGINT or SIGTERM it stops accepting requests, ends the event streams,
then drains as worker does and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWorkerFlags(concurrency, inboxPoll, retention); err != nil {
				return err
			}
			token, err := readAPIToken(tokenFile)
			if err != nil {
				return err
			}
			if err := server.CheckListenAddr(addr, token != ""); err != nil {
				return failf(exitUsage, "--addr: %v", err)
			}
			if workflows != "" {
				if st, err := os.Stat(workflows); err != nil || !st.IsDir() {
					return failf(exitUsage, "--workflows %s: not a folder", workflows)
				}
			}
			var hooks []server.Hook
			if hooksFile != "" {
				if hooks, err = server.LoadHooksWith(hooksFile, os.Getenv, server.HookDefaults{MaxBody: hookMaxBody}); err != nil {
					return failf(exitUsage, "--hooks: %v", err)
				}
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return failf(exitFailed, "--addr %s: %v", addr, err)
			}
			defer ln.Close()
			endpoint := "http://" + ln.Addr().String()

			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The server exists only once the engine is open; events
			// before that have no stream to reach.
			var (
				srvMu sync.Mutex
				srv   *server.Server
			)
			m := metrics.New()
			events := func(ev interpreter.Event) {
				m.Events(ev)
				srvMu.Lock()
				s := srv
				srvMu.Unlock()
				if s != nil {
					s.OnEvent(ev)
				}
			}
			e, err := openEngine(context.WithoutCancel(ctx), store, engineOptions{noShell: noShell, concurrency: concurrency, name: "serve",
				inboxPoll: inboxPoll, retention: retention, endpoint: endpoint, events: events,
				wrapStore: m.WrapStore, inboxAnswered: m.InboxAnswered})
			var busy *busyError
			if errors.As(err, &busy) {
				return failf(exitFailed, "%v; a second writer would fence it: send it commands or stop it first", busy)
			}
			if err != nil {
				return err
			}
			defer e.Close()
			if err := m.Watch(metrics.Source{Runtime: e.rt, Lease: e.lease}); err != nil {
				return failf(exitFailed, "metrics: %v", err)
			}
			s, err := server.New(server.Config{
				Runtime: e.rt, Interpreter: e.it, WorkflowsDir: workflows, NoShell: noShell, Token: token, Hooks: hooks,
				DSL:   interpreter.LoadOptions(builtin.New(builtin.Options{EnableShell: !noShell}), dsl.Options{}),
				Ready: e.ready, Logger: e.log, UI: ui.Handler(), Metrics: m.Handler(),
			})
			if err != nil {
				return failf(exitUsage, "%v", err)
			}
			srvMu.Lock()
			srv = s
			srvMu.Unlock()
			sv := e.serve(ctx)
			hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
			hs.RegisterOnShutdown(s.Close)
			httpErr := make(chan error, 1)
			go func() { httpErr <- hs.Serve(ln) }()
			sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
			sweepDone := make(chan struct{})
			go func() {
				defer close(sweepDone)
				sweepHookMarkers(sweepCtx, e, s)
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "tqw-dsl serve: working %s, serving %s (stop with Ctrl-C)\n", store, endpoint)
			var serveErr error
			select {
			case <-ctx.Done():
			case <-sv.Stopped():
			case serveErr = <-httpErr:
			}
			shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Requests first, so no command arrives while the worker drains.
			if err := hs.Shutdown(shutdownCtx); err != nil {
				e.log.Warn("stopping the HTTP server", "err", err)
			}
			s.Close()
			stopSweep()
			<-sweepDone
			werr := sv.Shutdown(shutdownCtx)
			if lerr := e.leaseLostError(werr); lerr != nil {
				_ = e.Close()
				return lerr
			}
			if cerr := e.Close(); cerr != nil {
				return cerr
			}
			if werr != nil {
				return failf(exitFailed, "serve stopped: %v", werr)
			}
			if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
				return failf(exitFailed, "serving HTTP on %s: %v", endpoint, serveErr)
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "tqw-dsl serve: stopped; every finished step is durable")
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&addr, "addr", defaultServeAddr, "HOST:PORT to listen on (port 0 picks a free one); beyond loopback only with a token")
	cmd.Flags().StringVar(&workflows, "workflows", "", "folder whose *.yaml files the API can submit by name and lists")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the API token (else $"+apiTokenEnv+")")
	cmd.Flags().StringVar(&hooksFile, "hooks", "", "YAML file of webhooks in (docs/API.md)")
	cmd.Flags().Int64Var(&hookMaxBody, "hook-max-body", server.DefaultHookMaxBody, "body limit in bytes of the webhooks whose --hooks file sets no max_body")
	cmd.Flags().BoolVar(&noShell, "no-shell", false, "do not run the shell action (steps using it fail; the API refuses such workflows)")
	cmd.Flags().IntVar(&concurrency, "concurrency", 8, "steps run at once")
	cmd.Flags().DurationVar(&inboxPoll, "inbox-poll", 5*time.Second, "longest pause between two reads of the inbox when no command came (commands over HTTP do not wait for it)")
	cmd.Flags().DurationVar(&retention, "retention", runtime.DefaultResultRetention, "how long a finished run's status, result, history and outputs are kept")
	return cmd
}

// readAPIToken returns the API token from file (when given) or
// TQW_API_TOKEN; "" when neither is set.
func readAPIToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(apiTokenEnv)), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", failf(exitUsage, "--token-file: %v", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", failf(exitUsage, "--token-file %s: the token is %d bytes; want at least 16", file, len(tok))
	}
	return tok, nil
}

// ready is /readyz: the writer lease is valid and the store answers.
// Cost: one HEAD of the lease object (a stat on file://).
func (e *engine) ready(ctx context.Context) error {
	if st := e.lease.State(); st != lease.Valid {
		return fmt.Errorf("the writer lease is %s", st)
	}
	if _, err := e.store.Head(ctx, lease.DefaultKey); err != nil && !errors.Is(err, objstore.ErrNotExist) {
		return fmt.Errorf("the store does not answer: %w", err)
	}
	return nil
}

// hookSweepEvery is how often serve forgets old webhook delivery ids.
const hookSweepEvery = time.Hour

func sweepHookMarkers(ctx context.Context, e *engine, s *server.Server) {
	t := time.NewTicker(hookSweepEvery)
	defer t.Stop()
	for {
		if _, err := s.SweepHookMarkers(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("forgetting old webhook delivery ids failed; the next sweep retries", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
