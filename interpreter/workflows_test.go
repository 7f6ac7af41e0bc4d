package interpreter

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	stdruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
)

// hostRouter sends every request to the test server standing in for its
// host (an unknown host fails the request), keeping the Host header.
type hostRouter map[string]string

func (h hostRouter) RoundTrip(r *http.Request) (*http.Response, error) {
	base, ok := h[r.URL.Host]
	if !ok {
		return nil, fmt.Errorf("test router: no server for host %q", r.URL.Host)
	}
	u, _ := url.Parse(base)
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host = u.Scheme, u.Host
	r2.Host = r.URL.Host
	return http.DefaultTransport.RoundTrip(r2)
}

// fakeWorld is the outside world the example workflows talk to.
type fakeWorld struct {
	mu       sync.Mutex
	requests []string // "HOST METHOD PATH header=value..."
	flaky    int
}

func (f *fakeWorld) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, fmt.Sprintf("%s %s %s auth=%q x-item=%q body=%s", r.Host, r.Method, r.URL.Path,
		r.Header.Get("Authorization"), r.Header.Get("X-Item"), body))
	f.flaky++
	flaky := f.flaky
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Host == "shop.example" && r.Method == "POST" && r.URL.Path == "/v1/orders":
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id": "order-7"}`)
	case r.Host == "shop.example" && strings.HasPrefix(r.URL.Path, "/orders/"):
		fmt.Fprint(w, `{"amount": 250}`)
	case r.Host == "flaky.example" && flaky == 1:
		http.Error(w, "try again", http.StatusServiceUnavailable)
	case r.Host == "flaky.example":
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"job": "queued"}`)
	case r.Host == "pages.example":
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "A page about durable workflows.")
	case strings.HasSuffix(r.Host, ".fan.example"):
		fmt.Fprint(w, `{"ok": true}`)
	default:
		http.NotFound(w, r)
	}
}

// exampleCase is how the test runs one file of workflows/.
type exampleCase struct {
	input any
	env   map[string]string
	// signal, when set, is sent (key from the run id) once the run waits.
	signal func(runID string) (key, payload string)
	want   string
}

// TestEveryExampleWorkflowRuns runs every file in workflows/ to its end,
// against local stand-ins for the services they call and the fake LLM,
// with a mock clock that jumps over their sleeps, retries and waits.
func TestEveryExampleWorkflowRuns(t *testing.T) {
	cases := map[string]exampleCase{
		"hello.yaml": {want: `"Hello, world!"`},
		"approval.tqw.yaml": {input: map[string]any{"request": "r-1"},
			signal: func(id string) (string, string) { return "approve:" + id, `{"approved": true, "by": "ana"}` },
			want:   `{"approved_by":"ana","request":"r-1"}`},
		"child.tqw.yaml":  {input: map[string]any{"order": "7"}, want: `"order 7"`},
		"parent.tqw.yaml": {input: map[string]any{"order_id": "42"}, want: `"child said: order 42"`},
		"fanout.tqw.yaml": {input: map[string]any{"urls": []any{"https://a.fan.example/1", "https://b.fan.example/2", "https://c.fan.example/3"}},
			want: `{"fetched":3,"ok":3}`},
		"http.tqw.yaml": {env: map[string]string{"SHOP_TOKEN": "shop-token-123"}, want: `"order-7"`},
		"llm.tqw.yaml": {input: map[string]any{"message": "I was charged twice"}, env: map[string]string{"LOCAL_LLM_KEY": "local-key-123"},
			want: `"billing"`},
		"refund.tqw.yaml": {input: map[string]any{"order_id": "o-9"},
			env:    map[string]string{"SHOP_TOKEN": "shop-token-123", "OPENAI_API_KEY": "sk-test-key"},
			signal: func(id string) (string, string) { return "approve:" + id, `{"approved": true}` },
			want:   `"Order o-9 refunded."`},
		"retry.tqw.yaml": {env: map[string]string{"API_TOKEN": "api-token-123"}, want: `{"job":"queued"}`},
		"map.tqw.yaml": {input: map[string]any{"lines": []any{map[string]any{"qty": 2, "price": 5}, map[string]any{"qty": 1, "price": 10}, map[string]any{"qty": 3}}},
			want: `{"failed":1,"priced":2,"total":20}`},
		"parallel.tqw.yaml": {input: map[string]any{"amount": 250}, want: `{"digits":3,"ok":true}`},
		"shell.tqw.yaml":    {want: `"16"`},
		"labels.tqw.yaml": {input: map[string]any{"order_id": "A-17", "lines": []any{map[string]any{"qty": 2, "price": 3.5}, map[string]any{"qty": 1, "price": 10}}},
			want: `{"lines":"2","message":"order A-17 adds up to 17","order":"A-17","total":17}`},
		"loop.tqw.yaml":        {input: map[string]any{"n": 150}, want: `{"last":"poll 150","polls":150}`},
		"sleep.tqw.yaml":       {want: `"slept"`},
		"summarize.tqw.yaml":   {input: map[string]any{"url": "https://pages.example/p"}, env: map[string]string{"OPENAI_API_KEY": "sk-test-key"}, want: `"A three-line summary."`},
		"wait_signal.tqw.yaml": {signal: func(id string) (string, string) { return id + ":wait", `"go"` }, want: `"go"`},
		"handlers.tqw.yaml":    {input: map[string]any{"order_id": "o-1"}, want: `"charged o-1"`},
		"deadline.tqw.yaml":    {signal: func(id string) (string, string) { return "approve:" + id, `"yes"` }, want: `"yes"`},
	}
	files, err := filepath.Glob("../workflows/*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	var want []string
	for n := range cases {
		want = append(want, n)
	}
	sort.Strings(names)
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("workflows/ holds %v; this test runs %v: give every example a case", names, want)
	}

	fake := llmfake.New()
	defer fake.Close()
	fake.Handle(func(req llmfake.Request) llmfake.Reply {
		last := req.Messages[len(req.Messages)-1].Content
		switch {
		case strings.Contains(last, "charged twice"):
			return llmfake.Reply{Content: `{"label": "billing"}`}
		case strings.HasPrefix(last, "Order "):
			return llmfake.Reply{Content: "Order o-9 refunded."}
		case strings.HasPrefix(last, "Summarize this page"):
			return llmfake.Reply{Content: "A three-line summary."}
		}
		return llmfake.Reply{Status: 400, Content: "unexpected prompt: " + last}
	})
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			world := &fakeWorld{}
			srv := httptest.NewServer(http.HandlerFunc(world.serve))
			defer srv.Close()
			llmBase := strings.TrimSuffix(fake.URL(), "/v1")
			router := hostRouter{"localhost:11434": llmBase, "api.openai.com": llmBase}
			for _, h := range []string{"shop.example", "flaky.example", "pages.example", "hooks.example", "cache.example",
				"a.fan.example", "b.fan.example", "c.fan.example"} {
				router[h] = srv.URL
			}
			c := cases[name]
			opts := []envOption{withHTTPClient(&http.Client{Transport: router})}
			for k, v := range c.env {
				opts = append(opts, withEnv(k, v))
			}
			e := newTestEnv(t, opts...)
			input := c.input
			if input == nil {
				input = map[string]any{}
			}
			runID := "ex-" + strings.TrimSuffix(strings.TrimSuffix(name, ".yaml"), ".tqw")
			ch := e.submit("../workflows/"+name, input, runID)
			e.start()
			o := e.drive(ch, runID, c.signal)
			if o.Status != runstate.Succeeded || string(o.Result) != c.want {
				t.Fatalf("%s ended %s with %s (%s); want succeeded with %s\nrequests: %v\nhistory: %s", name, o.Status, o.Result, o.Error, c.want,
					world.requests, outcomes(e.history(runID)))
			}
			if name == "fanout.tqw.yaml" {
				for _, r := range world.requests {
					if !strings.Contains(r, `x-item="0"`) && !strings.Contains(r, `x-item="1"`) && !strings.Contains(r, `x-item="2"`) {
						t.Errorf("fanout request without its index as a header: %s", r)
					}
				}
			}
		})
	}
}

// drive works the run to its end: it moves the mock clock to whatever the
// run waits for (a sleep, a retry's backoff, a wait's timeout) and sends
// the signal the case asks for once the run waits on it.
func (e *tenv) drive(ch <-chan *runstate.Outcome, runID string, signal func(string) (string, string)) *runstate.Outcome {
	e.t.Helper()
	sent := false
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case o := <-ch:
			return o
		default:
		}
		if time.Now().After(deadline) {
			st, _ := e.rt.Status(e.ctx, runID)
			e.t.Fatalf("run %s did not end; status %+v; history %s", runID, st, outcomes(e.history(runID)))
		}
		st, err := e.rt.Status(e.ctx, runID)
		switch {
		case err != nil:
		case st.State == runstate.StateWaiting && signal != nil && !sent:
			key, payload := signal(runID)
			if key != st.SignalKey {
				e.t.Fatalf("run %s waits on %q; the case signals %q", runID, st.SignalKey, key)
			}
			var v any
			if err := json.Unmarshal([]byte(payload), &v); err != nil {
				e.t.Fatal(err)
			}
			if _, err := e.rt.Signal(e.ctx, key, []byte(payload)); err != nil {
				e.t.Fatalf("signal %s: %v", key, err)
			}
			sent = true
		case (st.State == runstate.StateScheduled || st.State == runstate.StateWaiting && signal == nil) && st.Until.After(e.clock.Now()) &&
			st.Until.Before(e.clock.Now().Add(10*365*24*time.Hour)): // not a call's child, which has no timeout
			e.clock.Advance(st.Until.Sub(e.clock.Now()))
		}
		stdruntime.Gosched()
	}
}
