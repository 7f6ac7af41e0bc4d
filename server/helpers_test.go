package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// deadline bounds every wait of a test.
const deadline = 60 * time.Second

// testSecret is the value of the secret testdata/workflows/secret.yaml
// declares; no response may carry it.
const testSecret = "s3cr3t-value-never-shown"

// fixture is a writer (queue, runtime, interpreter, worker) on a mem
// store with a server in front of it, reached through a client whose
// transport checks every response against the OpenAPI document.
type fixture struct {
	t     *testing.T
	store objstore.Store
	q     *queue.Queue
	rt    *runtime.Runtime
	it    *interpreter.Interpreter
	srv   *server.Server
	hs    *httptest.Server
	c     *client.Client
	conf  *conformance
	ctx   context.Context
}

var (
	confOnce sync.Once
	confDoc  *conformance
)

// sharedConformance is the checker every fixture's client reports to, so
// TestEveryOperationExercised sees the whole package's traffic.
func sharedConformance(t *testing.T) *conformance {
	confOnce.Do(func() { confDoc = newConformance(t) })
	return confDoc
}

func newFixture(t *testing.T, adjust ...func(*server.Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, mem.New(), runtime.Options{}, adjust...)
}

// newFixtureOn is newFixture on store, with the runtime options of o
// (Sealing, ResultRetention, SweepInterval) that the fixture sets none of.
func newFixtureOn(t *testing.T, store objstore.Store, o runtime.Options, adjust ...func(*server.Config)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	f := &fixture{t: t, store: store, ctx: ctx, conf: sharedConformance(t)}
	var err error
	f.q, err = queue.Open(ctx, f.store, queue.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "SERVER_TEST_SECRET" {
			return testSecret
		}
		return ""
	}
	var srvMu sync.Mutex
	var srv *server.Server
	f.it, err = interpreter.New(f.q, f.store, interpreter.Options{Actions: builtin.New(builtin.Options{}), Getenv: getenv, Logger: quiet(),
		Events: func(ev interpreter.Event) {
			srvMu.Lock()
			s := srv
			srvMu.Unlock()
			if s != nil {
				s.OnEvent(ev)
			}
		},
		Runtime: runtime.Options{Logger: quiet(), ShutdownTimeout: -1, StoreNamespaces: interpreter.StoreNamespaces(),
			Sealing: o.Sealing, ResultRetention: o.ResultRetention, SweepInterval: o.SweepInterval}})
	if err != nil {
		t.Fatal(err)
	}
	f.rt = f.it.Runtime()
	w := f.rt.Spawn(context.Background())
	cfg := server.Config{Runtime: f.rt, Interpreter: f.it, WorkflowsDir: "testdata/workflows", Getenv: getenv, AllowInline: true,
		DSL: interpreter.LoadOptions(builtin.New(builtin.Options{}), dsl.Options{}), Heartbeat: 50 * time.Millisecond, Logger: quiet()}
	for _, a := range adjust {
		a(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srvMu.Lock()
	srv = s
	srvMu.Unlock()
	f.srv = s
	f.hs = httptest.NewServer(s.Handler())
	f.c = f.client(cfg.Token)
	t.Cleanup(func() {
		f.hs.CloseClientConnections()
		s.Close()
		f.hs.Close()
		sctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := w.Shutdown(sctx); err != nil {
			t.Errorf("worker: %v", err)
		}
		_ = f.q.Close()
	})
	return f
}

// client returns a client with token whose responses are checked.
func (f *fixture) client(token string) *client.Client {
	return client.New(f.hs.URL, client.Options{Token: token, HTTPClient: &http.Client{Transport: &checkingTransport{t: f.t, conf: f.conf}}})
}

// raw returns an HTTP client whose responses are checked.
func (f *fixture) raw() *http.Client {
	return &http.Client{Transport: &checkingTransport{t: f.t, conf: f.conf}}
}

// waitState polls the run until its state is one of states.
func (f *fixture) waitState(id string, states ...string) client.Run {
	f.t.Helper()
	var last client.Run
	for {
		run, err := f.c.Run(f.ctx, id)
		if err == nil {
			last = run
			for _, s := range states {
				if run.State == s {
					return run
				}
			}
		}
		select {
		case <-f.ctx.Done():
			f.t.Fatalf("run %s did not reach %v within %v; last state %q (err %v)", id, states, deadline, last.State, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// conformance checks responses against the OpenAPI document and records
// which operations were exercised.
type conformance struct {
	doc    libopenapi.Document
	model  *v3.Document
	v      validator.Validator
	sv     schema_validation.SchemaValidator
	routes []route
	mu     sync.Mutex
	seen   map[string]map[int]bool // "GET /v1/runs" -> statuses
	vmu    sync.Mutex
}

type route struct {
	op string // "GET /v1/runs/{id}"
	re *regexp.Regexp
}

func newConformance(t *testing.T) *conformance {
	doc, err := libopenapi.NewDocument(server.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("openapi.json is not an OpenAPI 3 model: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("openapi.json: building the validator: %v", errs)
	}
	c := &conformance{doc: doc, model: &m.Model, v: v, sv: schema_validation.NewSchemaValidator(), seen: map[string]map[int]bool{}}
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		pat := regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(regexp.QuoteMeta(path), `[^/]+`)
		if strings.HasSuffix(path, "{key}") {
			pat = strings.TrimSuffix(pat, `[^/]+`) + `.+`
		}
		for method := range item.GetOperations().FromOldest() {
			c.routes = append(c.routes, route{op: strings.ToUpper(method) + " " + path, re: regexp.MustCompile("^" + pat + "$")})
		}
	}
	return c
}

func (c *conformance) operation(method, path string) string {
	for _, r := range c.routes {
		if strings.HasPrefix(r.op, method+" ") && r.re.MatchString(path) {
			return r.op
		}
	}
	return ""
}

// operations returns every operation the document declares.
func (c *conformance) operations() []string {
	var out []string
	for _, r := range c.routes {
		out = append(out, r.op)
	}
	sort.Strings(out)
	return out
}

// checkSchema validates a JSON value against a component schema.
func (c *conformance) checkSchema(t *testing.T, name string, data []byte) {
	t.Helper()
	sp := c.model.Components.Schemas.GetOrZero(name)
	if sp == nil {
		t.Fatalf("openapi.json has no schema %s", name)
	}
	c.vmu.Lock()
	ok, errs := c.sv.ValidateSchemaBytes(sp.Schema(), data)
	c.vmu.Unlock()
	if !ok {
		t.Errorf("%s does not match schema %s: %s", data, name, describeValidation(errs))
	}
}

// checkingTransport validates every response's status and body against
// the document (event streams: status and content type; their events
// are checked by the tests that read them).
type checkingTransport struct {
	t    *testing.T
	conf *conformance
}

func (ct *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	op := ct.conf.operation(req.Method, req.URL.Path)
	if op == "" {
		ct.t.Errorf("%s %s answered %d but the OpenAPI document declares no such operation", req.Method, req.URL.Path, resp.StatusCode)
		return resp, nil
	}
	ct.conf.mu.Lock()
	if ct.conf.seen[op] == nil {
		ct.conf.seen[op] = map[int]bool{}
	}
	ct.conf.seen[op][resp.StatusCode] = true
	ct.conf.mu.Unlock()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if resp.StatusCode != http.StatusOK {
			ct.t.Errorf("%s: an event stream answered %d", op, resp.StatusCode)
		}
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	vresp := *resp
	vresp.Body = io.NopCloser(bytes.NewReader(body))
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	ct.conf.vmu.Lock()
	ok, errs := ct.conf.v.ValidateHttpResponse(vreq, &vresp)
	ct.conf.vmu.Unlock()
	if !ok {
		ct.t.Errorf("%s %s answered %d with a body that does not match the OpenAPI document: %s\nbody: %s", req.Method, req.URL.Path, resp.StatusCode, describeValidation(errs), truncate(body))
	}
	if !json.Valid(body) {
		ct.t.Errorf("%s %s answered %d with a body that is not JSON: %s", req.Method, req.URL.Path, resp.StatusCode, truncate(body))
	}
	return resp, nil
}

func describeValidation(errs []*vErrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n  " + e.Message + ": " + e.Reason)
		for _, f := range e.SchemaValidationErrors {
			b.WriteString("\n    " + f.Reason + " at " + f.FieldPath + " (" + f.KeywordLocation + ")")
		}
	}
	return b.String()
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}
