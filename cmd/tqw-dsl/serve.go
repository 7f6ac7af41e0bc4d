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
		noShell, allowInline                         bool
		secrets                                      []string
		concurrency                                  int
		inboxPoll, retention                         time.Duration
		visits                                       int
		allowOrigins, allowHosts                     []string
		limits                                       serveLimits
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

What a token holder may do, and what serve refuses, is docs/API.md's "Trust
model": workflows sent inline are refused unless --allow-inline; a workflow
calls only files of --workflows; runs read only the secrets named with
--secret or declared by the --workflows files, whoever submitted them.

On SIGINT or SIGTERM it stops accepting requests, ends the event streams,
then drains as worker does and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWorkerFlags(concurrency, inboxPoll, retention); err != nil {
				return err
			}
			if err := checkHistoryVisits(visits); err != nil {
				return err
			}
			token, err := readAPIToken(tokenFile)
			if err != nil {
				return err
			}
			if err := limits.check(); err != nil {
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
			// Runs read only the secrets the operator allows, whoever
			// submitted them (HTTP, webhook or another process's inbox
			// command): the interpreter reads through the same policy.
			dslOpts := interpreter.LoadOptions(builtin.New(builtin.Options{EnableShell: !noShell}), dsl.Options{})
			secretPolicy, err := server.NewSecretPolicy(workflows, secrets, dslOpts, os.Getenv)
			if err != nil {
				return failf(exitUsage, "--secret: %v", err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return failf(exitFailed, "--addr %s: %v", addr, err)
			}
			defer ln.Close()
			endpoint := "http://" + ln.Addr().String()
			// HTTP answers from the start: /healthz, and /readyz says why
			// it is not ready while the store opens (a full disk can hold
			// that up for long).
			var handler handlerSwitch
			handler.set(server.Starting(openingReady(store, time.Now())))
			hs, limited := limits.httpServer(ln, &handler, logger(os.Stderr))
			httpErr := make(chan error, 1)
			go func() { httpErr <- hs.Serve(limited) }()
			fmt.Fprintf(cmd.ErrOrStderr(), "tqw-dsl serve: listening on %s, opening the store %s\n", endpoint, store)
			stopHTTP := func() {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = hs.Shutdown(sctx)
			}

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
			type opened struct {
				e   *engine
				err error
			}
			openDone := make(chan opened, 1)
			go func() {
				e, err := openEngine(context.WithoutCancel(ctx), store, engineOptions{noShell: noShell, concurrency: concurrency, name: "serve",
					inboxPoll: inboxPoll, retention: retention, historyVisits: visits, endpoint: endpoint, events: events, getenv: secretPolicy.Getenv,
					wrapStore: m.WrapStore, inboxAnswered: m.InboxAnswered, ended: m.RunEnded})
				openDone <- opened{e, err}
			}()
			var e *engine
			select {
			case o := <-openDone:
				e, err = o.e, o.err
			case <-ctx.Done():
				// A store that does not take writes can hold the opening
				// up for good; nothing was worked, so nothing is lost.
				stopHTTP()
				fmt.Fprintf(cmd.ErrOrStderr(), "tqw-dsl serve: stopped before the store %s opened\n", store)
				return nil
			}
			var busy *busyError
			if err != nil {
				stopHTTP()
			}
			if errors.As(err, &busy) {
				return failf(exitFailed, "%v; a second writer would fence it: send it commands or stop it first", busy)
			}
			if err != nil {
				return err
			}
			defer e.Close()
			if err := m.Watch(metrics.Source{Runtime: e.rt, Lease: e.lease}); err != nil {
				stopHTTP()
				return failf(exitFailed, "metrics: %v", err)
			}
			s, err := server.New(server.Config{
				Runtime: e.rt, Interpreter: e.it, WorkflowsDir: workflows, NoShell: noShell, Token: token, Hooks: hooks,
				DSL: dslOpts, AllowInline: allowInline, Secrets: secretPolicy,
				Ready: e.ready, Logger: e.log, UI: ui.Handler(), Metrics: m.Handler(),
				ListenAddr: ln.Addr().String(), AllowedHosts: append(listenName(addr, ln.Addr()), allowHosts...), AllowedOrigins: allowOrigins,
				Observer: m, TracerProvider: e.tracing.TracerProvider(),
				DurableTimeout: limits.durableTimeout,
			})
			if err != nil {
				stopHTTP()
				return failf(exitUsage, "%v", err)
			}
			srvMu.Lock()
			srv = s
			srvMu.Unlock()
			sv := e.serve(ctx)
			hs.RegisterOnShutdown(s.Close)
			handler.set(s.Handler())
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
	cmd.Flags().StringArrayVar(&allowOrigins, "allow-origin", nil, "an origin (https://tqw.example.com) whose pages may call the API besides serve's own, e.g. a reverse proxy's; repeatable (docs/API.md, Browser and network model)")
	cmd.Flags().StringArrayVar(&allowHosts, "allow-host", nil, "a name (NAME or NAME:PORT) the Host header may carry besides the listen address, e.g. a reverse proxy's; repeatable")
	cmd.Flags().StringVar(&workflows, "workflows", "", "folder whose *.yaml files the API can submit by name and lists")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the API token (else $"+apiTokenEnv+")")
	cmd.Flags().StringVar(&hooksFile, "hooks", "", "YAML file of webhooks in (docs/API.md)")
	cmd.Flags().BoolVar(&allowInline, "allow-inline", false, "run workflows sent inline over HTTP (POST /v1/runs with yaml); they can call only files of --workflows")
	cmd.Flags().StringArrayVar(&secrets, "secret", nil, "an environment variable runs may read as a secret, besides those the --workflows files declare (repeatable)")
	cmd.Flags().Int64Var(&hookMaxBody, "hook-max-body", server.DefaultHookMaxBody, "body limit in bytes of the webhooks whose --hooks file sets no max_body")
	cmd.Flags().BoolVar(&noShell, "no-shell", false, "do not run the shell action (steps using it fail; the API refuses such workflows)")
	cmd.Flags().IntVar(&concurrency, "concurrency", 8, "steps run at once")
	cmd.Flags().DurationVar(&inboxPoll, "inbox-poll", 5*time.Second, "longest pause between two reads of the inbox when no command came (commands over HTTP do not wait for it)")
	cmd.Flags().DurationVar(&retention, "retention", runtime.DefaultResultRetention, "how long a finished run's status, result, history and outputs are kept")
	addHistoryVisitsFlag(cmd, &visits)
	limits.addFlags(cmd)
	return cmd
}

// listenName is the host name --addr gives (not an address) with the
// port listened on, a name the Host header may carry: the listener
// reports only the address the name resolved to.
func listenName(addr string, listened net.Addr) []string {
	host, _, err := net.SplitHostPort(addr)
	_, port, perr := net.SplitHostPort(listened.String())
	if err != nil || perr != nil || host == "" || net.ParseIP(host) != nil {
		return nil
	}
	return []string{net.JoinHostPort(host, port)}
}

// minTokenBytes is the shortest API token serve accepts, from either
// source.
const minTokenBytes = 16

// readAPIToken returns the API token from file (when given) or
// TQW_API_TOKEN, trimmed; "" when neither is set. A token shorter than
// minTokenBytes is a usage error naming its source.
func readAPIToken(file string) (string, error) {
	tok, source := strings.TrimSpace(os.Getenv(apiTokenEnv)), apiTokenEnv
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", failf(exitUsage, "--token-file: %v", err)
		}
		tok, source = strings.TrimSpace(string(b)), "--token-file "+file
	}
	if tok == "" && file == "" {
		return "", nil
	}
	if len(tok) < minTokenBytes {
		return "", failf(exitUsage, "%s: the token is %d bytes; want at least %d (e.g. openssl rand -hex 32)", source, len(tok), minTokenBytes)
	}
	return tok, nil
}

// ready is /readyz: the writer lease is valid, the store takes writes
// (the log is not stopped, its latest requests did not fail, a file
// store's filesystem is not full) and answers. Cost: one HEAD of the
// lease object (a stat on file://) and, on file://, one statfs(2).
func (e *engine) ready(ctx context.Context) error {
	if st := e.lease.State(); st != lease.Valid {
		return fmt.Errorf("the writer lease is %s", st)
	}
	db := e.q.DB()
	if err := db.Err(); err != nil {
		return fmt.Errorf("the store's log takes no more writes: %w", err)
	}
	if h := db.Health(); h.Failing {
		return fmt.Errorf("the store has been failing requests since %s (%d attempts; writes wait and are retried): %w",
			h.Since.UTC().Format(time.RFC3339), h.Failures, h.LastError)
	}
	if err := storeSpace(e.url); err != nil {
		return err
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
