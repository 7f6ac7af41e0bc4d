package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/server/wire"
)

// Config is what New needs: the writer's runtime and interpreter (the
// process opened them; the server opens nothing itself) and how to serve.
type Config struct {
	// Runtime and Interpreter are the store's writer, bound to each other
	// (interpreter.Interpreter.Bind); required.
	Runtime     *runtime.Runtime
	Interpreter *interpreter.Interpreter
	// WorkflowsDir is the folder whose *.yaml and *.yml files can be
	// submitted by name and are listed by /v1/workflows; "" serves none.
	WorkflowsDir string
	// DSL are the options workflow files are parsed with (see
	// interpreter.LoadOptions).
	DSL dsl.Options
	// NoShell refuses workflows that use the shell action.
	NoShell bool
	// Getenv reads the secrets a submitted workflow declares, to refuse
	// one whose secrets are not set (nil: os.Getenv).
	Getenv func(string) string
	// ListenAddr is the address the server listens on (net.Listener's
	// Addr, its port resolved), which Host may name; "" leaves only the
	// address each connection arrived at. Host must name the server:
	// ListenAddr, the connection's local address, localhost:PORT when
	// that is loopback, or an AllowedHosts entry; else 421.
	ListenAddr string
	// AllowedHosts are further names Host may carry (a reverse proxy's
	// public name): "NAME" matches any port, "NAME:PORT" that port.
	AllowedHosts []string
	// AllowedOrigins are origins ("https://tqw.example.com") whose pages
	// may call the API besides the server's own (a reverse proxy's public
	// origin); a request from any other origin is refused 403.
	AllowedOrigins []string
	// AllowInline accepts workflows sent inline (POST /v1/runs with
	// yaml); without it they are refused with 403 inline_disabled.
	AllowInline bool
	// Secrets are the secrets a submitted workflow may declare (a refusal
	// is 403 secret_not_allowed); nil: those the workflow files of
	// WorkflowsDir declare, read with Getenv. Pass the same policy's
	// Getenv as the interpreter's (interpreter.Options.Getenv), so that
	// runs submitted another way read no other secret either.
	Secrets *SecretPolicy
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every endpoint except /healthz, /readyz, /metrics, the UI's assets
	// and webhooks (which carry their own credentials). Without it the
	// process must listen on loopback only (CheckListenAddr).
	Token string
	// Hooks are the webhooks served under /v1/hooks/{name} (LoadHooks).
	Hooks []Hook
	// Ready reports whether the process may serve: its writer lease is
	// held and the store answers; nil always is. /readyz calls it.
	Ready func(context.Context) error
	// UI, when set, is mounted at / (the web UI, package server/ui).
	UI http.Handler
	// Metrics, when set, is mounted at /metrics.
	Metrics http.Handler
	// Logger receives request failures and recovered panics, and at
	// info one audit line per request and per webhook (server/audit.go);
	// nil discards.
	Logger *slog.Logger
	// Observer, when set, receives the HTTP measurements (requests,
	// event streams, webhooks, signal latency): server/metrics.Metrics.
	Observer Observer
	// TracerProvider, when set, makes each request a server span named
	// by its route template, a child of the caller's traceparent (so of
	// the submit span and the run's spans); nil traces nothing.
	TracerProvider trace.TracerProvider
	// DurableTimeout bounds how long a submission, a signal or a
	// cancellation waits for the store to make its write durable; past
	// it the request is answered 503 with Retry-After (the write may
	// still land). 0 means DefaultDurableTimeout.
	DurableTimeout time.Duration
	// Heartbeat is the interval of SSE keep-alive comments and of the
	// state poll that notices changes made by other processes (inbox
	// commands); 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// StreamWriteTimeout bounds each write of an event stream: a client
	// that stops reading while the connection's buffers are full loses
	// its stream once a write has waited this long, instead of holding a
	// goroutine and a connection until it goes. 0 means
	// DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
}

// DefaultStreamWriteTimeout is Config.StreamWriteTimeout's default.
const DefaultStreamWriteTimeout = 30 * time.Second

// replayRing is how many recent events the broker keeps for clients
// that reconnect (a variable so tests can shrink it).
var replayRing = defaultReplayRing

// DefaultHeartbeat is Config.Heartbeat's default.
const DefaultHeartbeat = time.Second

// Server serves the HTTP API of one store's writer.
type Server struct {
	cfg     Config
	rt      *runtime.Runtime
	it      *interpreter.Interpreter
	insp    *runtime.Inspector
	log     *slog.Logger
	obs     Observer
	tokenH  [sha256.Size]byte
	hosts   *hostGuard
	hooks   map[string]*hookState
	events  *broker
	handler http.Handler
}

// ErrConfig is matched by the errors New returns for an unusable Config.
var ErrConfig = errors.New("server: invalid configuration")

// New returns a server for cfg. Feed it the interpreter's step events with
// OnEvent (interpreter.Options.Events) and stop its event streams with
// Close.
func New(cfg Config) (*Server, error) {
	if cfg.Runtime == nil || cfg.Interpreter == nil {
		return nil, fmt.Errorf("%w: Runtime and Interpreter are required", ErrConfig)
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DurableTimeout <= 0 {
		cfg.DurableTimeout = DefaultDurableTimeout
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if cfg.WorkflowsDir != "" {
		st, err := os.Stat(cfg.WorkflowsDir)
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: workflows folder %s: not a readable folder", ErrConfig, cfg.WorkflowsDir)
		}
	}
	if cfg.Secrets == nil {
		p, err := NewSecretPolicy(cfg.WorkflowsDir, nil, cfg.DSL, cfg.Getenv)
		if err != nil {
			return nil, err
		}
		cfg.Secrets = p
	}
	s := &Server{cfg: cfg, rt: cfg.Runtime, it: cfg.Interpreter, insp: cfg.Runtime.Inspector(), log: cfg.Logger,
		hooks: map[string]*hookState{}}
	if s.obs = cfg.Observer; s.obs == nil {
		s.obs = noObserver{}
	}
	if cfg.Token != "" {
		s.tokenH = sha256.Sum256([]byte(cfg.Token))
	}
	var err error
	if s.hosts, err = newHostGuard(cfg); err != nil {
		return nil, err
	}
	for i := range cfg.Hooks {
		h := &cfg.Hooks[i]
		if err := h.check(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if _, dup := s.hooks[h.Name]; dup {
			return nil, fmt.Errorf("%w: hook %q is defined twice", ErrConfig, h.Name)
		}
		s.hooks[h.Name] = newHookState(h)
	}
	s.events = newBroker(s, replayRing)
	s.handler = s.routes()
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// OnEvent feeds the server an interpreter step event; it never blocks.
// Pass it as interpreter.Options.Events.
func (s *Server) OnEvent(ev interpreter.Event) { s.events.step(ev) }

// Close ends every event stream; requests in flight are the
// http.Server's to drain.
func (s *Server) Close() { s.events.close() }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, wire.Health{OK: true})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPI)
	})
	mux.Handle("POST /v1/runs", bodyOf(jsonBody, s.submitRun))
	mux.HandleFunc("GET /v1/runs", s.listRuns)
	mux.HandleFunc("GET /v1/runs/{id}", s.getRun)
	mux.HandleFunc("GET /v1/runs/{id}/history", s.runHistory)
	mux.Handle("POST /v1/runs/{id}/cancel", bodyOf(jsonBody, s.cancelRun))
	mux.Handle("POST /v1/runs/{id}/fork", bodyOf(jsonBody, s.forkRun))
	mux.HandleFunc("GET /v1/runs/{id}/diff/{other}", s.diffRuns)
	mux.HandleFunc("GET /v1/runs/{id}/export", s.exportRun)
	mux.Handle("POST /v1/import", bodyOf(jsonBody, s.importRun))
	mux.HandleFunc("GET /v1/runs/{id}/events", s.runEvents)
	mux.Handle("POST /v1/signals/{key...}", bodyOf(jsonBody, s.sendSignal))
	mux.Handle("POST /v1/runs/{id}/retry", bodyOf(jsonBody, s.retryRun))
	mux.Handle("POST /v1/runs/{id}/skip", bodyOf(jsonBody, s.skipRun))
	mux.Handle("POST /v1/bulk", bodyOf(jsonBody, s.bulk))
	mux.HandleFunc("DELETE /v1/signals/{key...}", s.clearSignal)
	mux.HandleFunc("GET /v1/events", s.allEvents)
	mux.HandleFunc("GET /v1/workflows", s.listWorkflows)
	mux.HandleFunc("GET /v1/workflows/{name}", s.getWorkflow)
	mux.Handle("POST /v1/validate", bodyOf(yamlBody, s.validate))
	mux.HandleFunc("GET /v1/schema", s.schema)
	mux.HandleFunc("POST /v1/hooks/{name}", s.hook)
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("no endpoint %s %s; see /v1/openapi.json", r.Method, r.URL.Path))
	})
	// The catch-alls match every method: they answer 405 for a path
	// another route serves with other methods.
	mux.Handle("/v1/", orMethodNotAllowed(mux, notFound))
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	if s.cfg.UI != nil {
		mux.Handle("/", orMethodNotAllowed(mux, s.cfg.UI))
	} else {
		mux.Handle("/", orMethodNotAllowed(mux, notFound))
	}
	return s.observe(mux, s.recoverer(s.guard(s.authenticate(noteRoute(mux)))))
}

// public reports whether path is served without the API token: probes,
// metrics, webhooks (they carry their own credentials) and the UI's
// assets, which hold no data (the UI asks for the token and sends it on
// its API calls).
func (s *Server) public(path string) bool {
	switch {
	case path == "/healthz", path == "/readyz", path == "/metrics":
		return true
	case strings.HasPrefix(path, "/v1/hooks/"):
		return true
	case strings.HasPrefix(path, "/v1/"), path == "/v1":
		return false
	}
	return s.cfg.UI != nil
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.public(r.URL.Path) || s.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="tqw"`)
		msg := "this endpoint needs the API token: send the header Authorization: Bearer <token>"
		if r.Header.Get("Authorization") != "" {
			msg = "the Authorization header does not carry the API token (want Bearer <token>)"
		}
		writeError(w, http.StatusUnauthorized, "unauthorized", "Authorization", msg)
	})
}

// authorized compares the bearer token in constant time (over hashes, so
// the length does not leak either). The scheme is case-insensitive (RFC
// 9110, section 11.1).
func (s *Server) authorized(r *http.Request) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(h[:], s.tokenH[:]) == 1
}

// recoverer turns a panic in a handler into a 500 with a JSON error; the
// stack goes to the log, never to the client.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil || v == http.ErrAbortHandler {
				if v != nil {
					panic(v)
				}
				return
			}
			s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, "internal", "", "the server failed on this request; its log says why")
		}()
		next.ServeHTTP(w, r)
	})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) { answerReady(w, r, s.cfg.Ready) }

func writeError(w http.ResponseWriter, status int, code, field, msg string) {
	writeJSON(w, status, wire.Error{Error: wire.ErrorBody{Code: code, Message: msg, Field: field}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the response failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// ErrNotLoopback is matched by CheckListenAddr's refusal.
var ErrNotLoopback = errors.New("server: refusing to listen beyond loopback without an API token")

// CheckListenAddr refuses an address that is not loopback-only (an IP of
// the loopback range or "localhost") when no token is configured: without
// a token anyone who reaches the port could run workflows.
func CheckListenAddr(addr string, haveToken bool) error {
	if haveToken {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("server: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if host == "" {
		host = "every interface"
	}
	return fmt.Errorf("%w: %s listens on %s; set a token (TQW_API_TOKEN or --token-file) or listen on 127.0.0.1", ErrNotLoopback, addr, host)
}
