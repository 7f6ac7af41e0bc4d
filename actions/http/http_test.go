package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/http"
)

type seen struct {
	Method, Path, Query, Body string
	Header                    nethttp.Header
}

// server records each request and answers with handler.
func server(t *testing.T, handler func(w nethttp.ResponseWriter, r *nethttp.Request)) (*httptest.Server, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var reqs []seen
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, string(body), r.Header.Clone()})
		mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), reqs...)
	}
}

func call(args map[string]any) *actions.Call {
	return &actions.Call{RunID: "run-7", StepID: "fetch", Attempt: 1, Args: args}
}

func wantError(t *testing.T, err error, typ string, retryable bool, status int) *actions.Error {
	t.Helper()
	e, ok := actions.AsError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want *actions.Error", err, err)
	}
	if e.Type != typ || e.Retryable != retryable || e.Status != status {
		t.Fatalf("err = %+v, want type %s retryable %v status %d", e, typ, retryable, status)
	}
	return e
}

func TestGetJSON(t *testing.T) {
	srv, reqs := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		_, _ = io.WriteString(w, `{"amount": 120, "id": 9007199254740993, "tags": ["x"]}`)
	})
	a := http.New(http.Options{})
	if a.Name() != "http" {
		t.Fatalf("Name = %q", a.Name())
	}
	out, err := a.Execute(context.Background(), call(map[string]any{
		"url":     srv.URL + "/orders/1?keep=1",
		"query":   map[string]any{"expand": "lines"},
		"headers": map[string]any{"Accept": "application/json"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	m := out.(map[string]any)
	if m["status"] != int64(200) {
		t.Fatalf("status = %#v", m["status"])
	}
	wantBody := map[string]any{"amount": int64(120), "id": int64(9007199254740993), "tags": []any{"x"}}
	if !reflect.DeepEqual(m["body"], wantBody) {
		t.Fatalf("body = %#v", m["body"])
	}
	h := m["headers"].(map[string]any)
	if h["x-multi"] != "a, b" || h["content-type"] != "application/json; charset=utf-8" {
		t.Fatalf("headers = %#v", h)
	}
	r := reqs()[0]
	if r.Method != "GET" || r.Path != "/orders/1" || r.Query != "expand=lines&keep=1" {
		t.Fatalf("request = %+v", r)
	}
	if got := r.Header.Get("Idempotency-Key"); got != "run-7/fetch" {
		t.Fatalf("Idempotency-Key = %q", got)
	}
	if _, err := json.Marshal(out); err != nil {
		t.Fatalf("output not JSON-compatible: %v", err)
	}
}

func TestBodies(t *testing.T) {
	srv, reqs := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		_, _ = io.WriteString(w, "plain answer")
	})
	a := http.New(http.Options{})
	cases := []struct {
		args        map[string]any
		body, ctype string
	}{
		{map[string]any{"method": "POST", "body": map[string]any{"run": "r", "n": int64(1)}}, `{"n":1,"run":"r"}`, "application/json"},
		{map[string]any{"method": "put", "body": []any{1.5, true}}, `[1.5,true]`, "application/json"},
		{map[string]any{"method": "PATCH", "body": "hello"}, "hello", "text/plain; charset=utf-8"},
		{map[string]any{"method": "POST", "body": "<x/>", "headers": map[string]any{"content-type": "application/xml"}}, "<x/>", "application/xml"},
		{map[string]any{"method": "DELETE"}, "", ""},
	}
	for i, c := range cases {
		c.args["url"] = srv.URL
		out, err := a.Execute(context.Background(), call(c.args))
		if err != nil {
			t.Fatal(err)
		}
		if b := out.(map[string]any)["body"]; b != "plain answer" {
			t.Fatalf("non-JSON response body = %#v, want the text", b)
		}
		r := reqs()[i]
		if r.Body != c.body || r.Header.Get("Content-Type") != c.ctype {
			t.Errorf("case %d: sent %q with Content-Type %q, want %q / %q", i, r.Body, r.Header.Get("Content-Type"), c.body, c.ctype)
		}
	}
}

func TestWorkflowIdempotencyKeyWins(t *testing.T) {
	srv, reqs := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {})
	_, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{
		"url": srv.URL, "headers": map[string]any{"idempotency-key": "mine"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := reqs()[0].Header.Values("Idempotency-Key"); !reflect.DeepEqual(got, []string{"mine"}) {
		t.Fatalf("Idempotency-Key = %v", got)
	}
}

func TestStatusErrors(t *testing.T) {
	status := 0
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":"nope"}`)
	})
	a := http.New(http.Options{})
	cases := []struct {
		status    int
		expect    any
		typ       string
		retryable bool
	}{
		{404, nil, actions.TypeHTTP4xx, false},
		{400, nil, actions.TypeHTTP4xx, false},
		{408, nil, actions.TypeHTTP4xx, true},
		{429, nil, actions.TypeHTTP4xx, true},
		{500, nil, actions.TypeHTTP5xx, true},
		{503, nil, actions.TypeHTTP5xx, true},
		{201, 200, http.TypeUnexpectedStatus, false},
		{200, []any{201, 202}, http.TypeUnexpectedStatus, false},
	}
	for _, c := range cases {
		status = c.status
		_, err := a.Execute(context.Background(), call(map[string]any{"url": srv.URL, "expect_status": c.expect}))
		e := wantError(t, err, c.typ, c.retryable, c.status)
		out := e.Output.(map[string]any)
		if !reflect.DeepEqual(out["body"], map[string]any{"error": "nope"}) || out["status"] != int64(c.status) {
			t.Errorf("status %d: error output = %#v", c.status, e.Output)
		}
	}
	// An expected non-2xx status is a success.
	status = 404
	out, err := a.Execute(context.Background(), call(map[string]any{"url": srv.URL, "expect_status": []any{200, 404}}))
	if err != nil || out.(map[string]any)["status"] != int64(404) {
		t.Fatalf("expected 404: %v, %v", out, err)
	}
}

func TestInvalidJSONBody(t *testing.T) {
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		_, _ = io.WriteString(w, `{"broken":`)
	})
	_, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": srv.URL}))
	e := wantError(t, err, http.TypeInvalidBody, false, 200)
	if e.Output.(map[string]any)["body"] != `{"broken":` {
		t.Fatalf("output = %#v", e.Output)
	}
}

func TestEmptyJSONBodyIsNull(t *testing.T) {
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(204)
	})
	out, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": srv.URL, "method": "HEAD"}))
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := out.(map[string]any)["body"]; !ok || b != nil {
		t.Fatalf("body = %#v, want nil", b)
	}
}

func TestResponseCap(t *testing.T) {
	chunked := false
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if chunked {
			w.(nethttp.Flusher).Flush() // no Content-Length: the cap is found while reading
		}
		_, _ = io.WriteString(w, strings.Repeat("x", 100))
	})
	a := http.New(http.Options{MaxResponseBytes: 100})
	if _, err := a.Execute(context.Background(), call(map[string]any{"url": srv.URL})); err != nil {
		t.Fatalf("exactly at the cap: %v", err)
	}
	for _, c := range []bool{false, true} {
		chunked = c
		_, err := a.Execute(context.Background(), call(map[string]any{"url": srv.URL, "max_response_bytes": 99}))
		wantError(t, err, http.TypeResponseTooLarge, false, 200)
	}
	_, err := http.New(http.Options{MaxResponseBytes: 99}).Execute(context.Background(), call(map[string]any{"url": srv.URL}))
	wantError(t, err, http.TypeResponseTooLarge, false, 200)
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": "http://" + addr + "/x?token=secret"}))
	e := wantError(t, err, actions.TypeHTTPConnection, true, 0)
	if strings.Contains(e.Error(), "secret") {
		t.Fatalf("error leaks the query: %v", e)
	}
}

func TestConnectionReset(t *testing.T) {
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		conn, _, err := w.(nethttp.Hijacker).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	})
	_, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": srv.URL}))
	wantError(t, err, actions.TypeHTTPConnection, true, 0)
}

func TestTLSCertificateRejected(t *testing.T) {
	srv := httptest.NewTLSServer(nethttp.HandlerFunc(func(nethttp.ResponseWriter, *nethttp.Request) {}))
	defer srv.Close()
	_, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": srv.URL}))
	wantError(t, err, actions.TypeHTTPConnection, false, 0)
	// With the test server's client the same call succeeds.
	if _, err := http.New(http.Options{Client: srv.Client()}).Execute(context.Background(), call(map[string]any{"url": srv.URL})); err != nil {
		t.Fatal(err)
	}
}

func TestTimeout(t *testing.T) {
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		<-r.Context().Done() // never answers; ends when the client gives up
	})
	_, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": srv.URL, "timeout": "50ms"}))
	e := wantError(t, err, actions.TypeTimeout, true, 0)
	if !errors.Is(e, context.DeadlineExceeded) {
		t.Fatalf("timeout error does not wrap DeadlineExceeded: %v", e)
	}
}

func TestDefaultTimeoutFromOptions(t *testing.T) {
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { <-r.Context().Done() })
	_, err := http.New(http.Options{Timeout: 50 * time.Millisecond}).Execute(context.Background(), call(map[string]any{"url": srv.URL}))
	wantError(t, err, actions.TypeTimeout, true, 0)
}

func TestBadURLDoesNotLeakQuery(t *testing.T) {
	_, err := http.New(http.Options{}).Execute(context.Background(), call(map[string]any{"url": "http://x/%zz?token=hunter2"}))
	e := wantError(t, err, actions.TypeValidation, false, 0)
	if strings.Contains(e.Error(), "hunter2") {
		t.Fatalf("error leaks the URL: %v", e)
	}
}

func TestCancel(t *testing.T) {
	arrived := make(chan struct{})
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := http.New(http.Options{}).Execute(ctx, call(map[string]any{"url": srv.URL}))
	wantError(t, err, actions.TypeCancelled, false, 0)
}

func TestArgumentErrors(t *testing.T) {
	cases := []struct {
		args  map[string]any
		field string
	}{
		{map[string]any{}, "url"},
		{map[string]any{"url": "ftp://x"}, "url"},
		{map[string]any{"url": "http://"}, "url"},
		{map[string]any{"url": "::"}, "url"},
		{map[string]any{"url": "http://x", "method": "FETCH"}, "method"},
		{map[string]any{"url": "http://x", "methd": "GET"}, "methd"},
		{map[string]any{"url": "http://x", "headers": map[string]any{"A": 1}}, "headers.A"},
		{map[string]any{"url": "http://x", "headers": map[string]any{"Bad Name": "v"}}, "headers.Bad Name"},
		{map[string]any{"url": "http://x", "headers": map[string]any{"A": "v\r\nX: y"}}, "headers.A"},
		{map[string]any{"url": "http://x", "query": []any{"a"}}, "query"},
		{map[string]any{"url": "http://x", "timeout": "soon"}, "timeout"},
		{map[string]any{"url": "http://x", "expect_status": 99}, "expect_status"},
		{map[string]any{"url": "http://x", "expect_status": []any{200, "201"}}, "expect_status[1]"},
		{map[string]any{"url": "http://x", "expect_status": []any{}}, "expect_status"},
		{map[string]any{"url": "http://x", "max_response_bytes": 0}, "max_response_bytes"},
		{map[string]any{"url": "http://x", "max_response_bytes": "1MB"}, "max_response_bytes"},
	}
	a := http.New(http.Options{})
	for _, c := range cases {
		_, err := a.Execute(context.Background(), call(c.args))
		wantError(t, err, actions.TypeValidation, false, 0)
		var ae *actions.ArgError
		if !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("%v: %v, want field %q", c.args, err, c.field)
		}
	}
}

// FuzzArgs runs the http argument decoder and request builder on arbitrary
// JSON: no panic, and every failure is a validation error naming a field.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{
		`{"url":"http://127.0.0.1:1/x","method":"post","body":{"a":[1,2]},"query":{"q":"1"}}`,
		`{"url":"http://127.0.0.1:1","expect_status":[200,"x"]}`, `{"url":"http://127.0.0.1:1","headers":{"":"v"}}`,
		`{"url":"http://127.0.0.1:1","timeout":"1d","max_response_bytes":1e3}`,
	} {
		f.Add([]byte(s))
	}
	a := http.New(http.Options{Client: &nethttp.Client{Transport: refuse{}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		_, err := a.Execute(context.Background(), call(m))
		e, ok := actions.AsError(err)
		if !ok {
			t.Fatalf("untyped error %v", err)
		}
		var ae *actions.ArgError
		if e.Type != actions.TypeValidation {
			return
		}
		if !errors.As(err, &ae) {
			t.Fatalf("validation error without a field: %v", err)
		}
		if _, emptyKey := m[""]; ae.Field == "" && !emptyKey {
			t.Fatalf("validation error with an empty field: %v", err)
		}
	})
}

// refuse is a transport that never sends anything.
type refuse struct{}

func (refuse) RoundTrip(*nethttp.Request) (*nethttp.Response, error) {
	return nil, errors.New("fuzz: no network")
}
