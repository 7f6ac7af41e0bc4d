package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/queuetest"
	"github.com/tqw-dsl/tqw/internal/rttest"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var t0 = queuetest.T0

// delivery is one request the test server received.
type delivery struct {
	header http.Header
	body   []byte
	code   int
}

// server answers each run's callbacks from a script: the i-th request for
// run r gets script[r][i] (0 means block until the client gives up), and
// 200 once the script is used up.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	script map[string][]int
	got    map[string][]delivery
	seen   chan string
}

func newServer(t *testing.T, script map[string][]int) *server {
	s := &server{script: script, got: map[string][]delivery{}, seen: make(chan string, 100)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		run := r.Header.Get(HeaderRunID)
		s.mu.Lock()
		code := http.StatusOK
		if n := len(s.got[run]); n < len(s.script[run]) {
			code = s.script[run][n]
		}
		s.got[run] = append(s.got[run], delivery{header: r.Header.Clone(), body: body, code: code})
		s.mu.Unlock()
		if r.Method != http.MethodPost {
			code = http.StatusMethodNotAllowed
		}
		if code == 0 {
			<-r.Context().Done() // the client's timeout fires
		} else {
			w.WriteHeader(code)
		}
		s.seen <- run
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.got {
		n += len(d)
	}
	return n
}

func (s *server) deliveries(run string) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery{}, s.got[run]...)
}

// env is an rttest env whose runtime runs h as its terminal hook; its
// steps succeed with their input, or fail when the input is "fail".
type env struct{ *rttest.Env }

func newEnv(t *testing.T, h runtime.TerminalHook) *env {
	t.Helper()
	runner := runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		if string(s.Payload) == "fail" {
			return runtime.Fail("asked to fail"), nil
		}
		return runtime.Succeed(s.Payload), nil
	})
	return &env{rttest.New(t, rttest.Runtime(runner, runtime.Options{TerminalHook: h}), func(e *queuetest.Env) {
		e.Options.DefaultConfig.MaxAttempts = 4
	})}
}

func (e *env) submit(id, input, url string) {
	e.T.Helper()
	h := map[string]string{"tenant": "t1"}
	if url != "" {
		h[CallbackURLHeader] = url
	}
	e.Submit(runtime.RunSpec{RunID: id, Input: []byte(input), Headers: h})
}

// settle advances the clock past the notification backoff while
// notifications wait for a retry, until the server received requests
// requests, dead notifications number dead and none is active. (Stats reads
// its counters one by one, so a zero active count alone can be a
// transition seen half-way.)
func (e *env) settle(srv *server, requests int, dead int64) queue.Stats {
	e.T.Helper()
	var st queue.Stats
	notify := e.RT.NotifyQueueName()
	e.Until(func() bool {
		var err error
		if st, err = e.Q.Stats(e.Ctx, notify); err != nil {
			e.T.Fatal(err)
		}
		return st.Pending+st.Claimed+st.Scheduled == 0 && st.Dead == dead && srv.requests() == requests
	}, func() string {
		return fmt.Sprintf("notifications never settled: %+v, %d requests", st, srv.requests())
	}, notify)
	return st
}

func TestDeliveryAndRetries(t *testing.T) {
	srv := newServer(t, map[string][]int{
		"r503": {503, 502}, "r408": {408}, "r429": {429}, "r404": {404}, "r400": {400}, "slow": {0},
	})
	secret := []byte("s3cret")
	h := New(Options{Timeout: 200 * time.Millisecond, Secret: secret, Now: func() time.Time { return t0 }, UserAgent: "tqw-test"})
	e := newEnv(t, h)
	e.Start()
	runs := []string{"ok", "r503", "r408", "r429", "r404", "r400", "slow", "failed", "nocb"}
	for _, id := range runs {
		input, url := `{"n":1}`, srv.URL+"/cb"
		switch id {
		case "failed":
			input = "fail"
		case "nocb":
			url = ""
		case "ok":
			input = "not json"
		}
		e.submit(id, input, url)
	}
	e.Terminated(runs...)
	// 1 + 3 + 2 + 2 + 1 + 1 + 2 + 1 requests; the 404 and 400 dead-letter.
	e.settle(srv, 13, 2)
	want := map[string][]int{"ok": {200}, "r503": {503, 502, 200}, "r408": {408, 200}, "r429": {429, 200},
		"r404": {404}, "r400": {400}, "slow": {0, 200}, "failed": {200}, "nocb": nil}
	for id, codes := range want {
		got := srv.deliveries(id)
		if len(got) != len(codes) {
			t.Fatalf("run %s: %d requests, want %d", id, len(got), len(codes))
		}
		for i, d := range got {
			if d.code != codes[i] {
				t.Fatalf("run %s request %d answered %d, want %d", id, i, d.code, codes[i])
			}
			if d.header.Get(HeaderRunID) != id || d.header.Get("Content-Type") != "application/json" || d.header.Get("User-Agent") != "tqw-test" {
				t.Fatalf("run %s headers %v", id, d.header)
			}
			if d.header.Get(HeaderSignature) != Sign(secret, t0.Unix(), d.body) {
				t.Fatalf("run %s: signature %q does not verify", id, d.header.Get(HeaderSignature))
			}
		}
	}
	// Bodies.
	var p Payload
	ok := srv.deliveries("ok")[0]
	if err := json.Unmarshal(ok.body, &p); err != nil {
		t.Fatal(err)
	}
	if p.RunID != "ok" || p.Status != "succeeded" || p.ResultBase64 != "bm90IGpzb24=" || p.Result != nil ||
		!p.SubmittedAt.Equal(t0) || !p.FinishedAt.Equal(t0) || ok.header.Get(HeaderRunStatus) != "succeeded" {
		t.Fatalf("ok payload %+v (%s)", p, ok.body)
	}
	r := srv.deliveries("r503")[2]
	if err := json.Unmarshal(r.body, &p); err != nil || string(p.Result) != `{"n":1}` {
		t.Fatalf("JSON result: %s %v", r.body, err)
	}
	f := srv.deliveries("failed")[0]
	if err := json.Unmarshal(f.body, &p); err != nil || p.Status != "failed" || p.Reason != "asked to fail" ||
		f.header.Get(HeaderRunStatus) != "failed" {
		t.Fatalf("failed payload %s %v", f.body, err)
	}
	var raw map[string]any
	_ = json.Unmarshal(f.body, &raw)
	if _, leaked := raw["tenant"]; leaked {
		t.Fatal("run headers leaked into the body")
	}
	// The dead letters say why.
	dead, err := e.Q.DeadJobs(e.Ctx, e.RT.NotifyQueueName(), "", 10)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead jobs %v %v", dead, err)
	}
	for _, j := range dead {
		if j.Attempts != 1 {
			t.Fatalf("dead notification %s after %d attempts, want 1 (permanent)", j.ID, j.Attempts)
		}
	}
}

// Transient answers past the attempt limit dead-letter the notification.
func TestRetriesExhausted(t *testing.T) {
	srv := newServer(t, map[string][]int{"down": {500, 500, 500, 500, 500}})
	e := newEnv(t, New(Options{}))
	e.Start()
	e.submit("down", "x", srv.URL)
	e.Terminated("down")
	e.settle(srv, 4, 1) // MaxAttempts 4, then dead
}

// The notification is enqueued in the commit that terminates the run: a
// cancelled pending run has its notification job when Cancel returns,
// before any worker runs, and exactly one.
func TestNotificationCreatedWithTerminatingCommit(t *testing.T) {
	srv := newServer(t, nil)
	e := newEnv(t, New(Options{}))
	e.submit("c1", "x", srv.URL)
	e.submit("c2", "x", "")
	for _, id := range []string{"c1", "c2"} {
		if ok, err := e.RT.Cancel(e.Ctx, id); !ok || err != nil {
			t.Fatalf("Cancel(%s): %v %v", id, ok, err)
		}
	}
	st, err := e.Q.Stats(e.Ctx, e.RT.NotifyQueueName())
	if err != nil || st.Pending != 1 {
		t.Fatalf("notification queue after Cancel: %+v %v; want exactly one pending job", st, err)
	}
	e.Start()
	e.settle(srv, 1, 0)
	d := srv.deliveries("c1")
	if len(d) != 1 || d[0].header.Get(HeaderRunStatus) != "cancelled" || len(srv.deliveries("c2")) != 0 {
		t.Fatalf("deliveries c1=%d c2=%d", len(d), len(srv.deliveries("c2")))
	}
}

func TestClassification(t *testing.T) {
	h := New(Options{})
	o := &runstate.Outcome{RunID: "x", Status: runstate.Succeeded, Headers: map[string]string{CallbackURLHeader: "ftp://h/x"}}
	if !h.Observes(o) || h.Observes(&runstate.Outcome{}) {
		t.Fatal("Observes")
	}
	if err := h.OnTermination(context.Background(), o, nil); !runtime.IsPermanent(err) {
		t.Fatalf("bad scheme: %v", err)
	}
	o.Headers[CallbackURLHeader] = "http://127.0.0.1:1/closed"
	if err := h.OnTermination(context.Background(), o, nil); err == nil || runtime.IsPermanent(err) {
		t.Fatalf("refused connection: %v", err)
	}
	for code, retry := range map[int]bool{408: true, 429: true, 500: true, 503: true, 599: true, 400: false, 404: false, 410: false, 302: false} {
		if Retryable(code) != retry {
			t.Fatalf("Retryable(%d) = %v", code, !retry)
		}
	}
	srv := newServer(t, map[string][]int{"x": {418}})
	o.Headers[CallbackURLHeader] = srv.URL
	err := h.OnTermination(context.Background(), o, nil)
	se, ok := AsStatusError(err)
	if !runtime.IsPermanent(err) || !ok || se.Code != 418 || !errors.Is(err, se) {
		t.Fatalf("418: %v", err)
	}
}
