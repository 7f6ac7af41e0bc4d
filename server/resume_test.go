package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// stalledWriter holds an event stream's writes until release is closed:
// a client that reads nothing while the runs progress.
type stalledWriter struct {
	http.ResponseWriter
	release <-chan struct{}
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	<-w.release
	return w.ResponseWriter.Write(b)
}

func (w *stalledWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *stalledWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stalledServer serves f's API, stalling the first connection of every
// event stream (not the reconnections, which carry Last-Event-ID) until
// release is closed.
func stalledServer(t *testing.T, f *fixture, release <-chan struct{}) *client.Client {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") == "" && r.URL.Path == "/v1/events" {
			w = &stalledWriter{ResponseWriter: w, release: release}
		}
		f.srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return client.New(hs.URL, client.Options{HTTPClient: &http.Client{Transport: &checkingTransport{t: t, conf: f.conf}}})
}

// submitGreets submits n runs of greet.yaml named prefix-i and waits
// until each succeeded.
func submitGreets(t *testing.T, f *fixture, prefix string, n int) map[string]bool {
	t.Helper()
	want := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		want[id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: id}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id := range want {
		f.waitState(id, "succeeded")
	}
	return want
}

// readUntilAllSucceeded reads st until every run of want was reported
// succeeded, failing on an error or the end of the stream. A reload
// event makes it reload the runs, as a client must; it returns how many
// it got.
func readUntilAllSucceeded(t *testing.T, f *fixture, st *client.Stream, want map[string]bool) (reloads int) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < len(want) {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("the stream of every run ended (%v) after reporting %d of %d runs succeeded: events were lost", err, len(seen), len(want))
		}
		if ev.Name == "reload" {
			f.conf.checkSchema(t, "ReloadEvent", ev.Data)
			reloads++
			list, err := f.c.ListRuns(f.ctx, client.ListOptions{Status: []string{"succeeded"}, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range list.Runs {
				if want[r.RunID] {
					seen[r.RunID] = true
				}
			}
			continue
		}
		if ev.Name != "run" {
			t.Fatalf("event %q on the stream of every run", ev.Name)
		}
		if ev.ID == "" {
			t.Fatalf("a run event without an id: %s", ev.Data)
		}
		f.conf.checkSchema(t, "RunSummary", ev.Data)
		var s client.RunSummary
		if err := json.Unmarshal(ev.Data, &s); err != nil {
			t.Fatal(err)
		}
		if want[s.RunID] && s.State == "succeeded" {
			seen[s.RunID] = true
		}
	}
	return reloads
}

// TestSlowSubscriberLosesNothing stalls a client of the stream of every
// run while 300 runs end, so the server's queue for it (shrunk to 64
// events) overflows: the
// server ends the stream with a resync event, the client reconnects with
// Last-Event-ID and still sees every run end. With a replay ring too
// small to reach back, the server tells it to reload the runs instead
// (a reload event), which the client does.
func TestSlowSubscriberLosesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		ring int
	}{{"replayed from the ring", 0}, {"told to reload", 16}} {
		t.Run(tc.name, func(t *testing.T) {
			defer server.SetSubscriberBuffer(64)()
			if tc.ring > 0 {
				defer server.SetReplayRing(tc.ring)()
			}
			f := newFixture(t)
			release := make(chan struct{})
			c := stalledServer(t, f, release)
			st, err := c.Events(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			want := submitGreets(t, f, "slow", 300)
			close(release)
			reloads := readUntilAllSucceeded(t, f, st, want)
			if st.Resyncs == 0 {
				t.Fatalf("the stalled stream was never told to resync: 300 runs did not overflow its queue of 64")
			}
			if (reloads > 0) != (tc.ring > 0) {
				t.Fatalf("%d reload events with a ring of %d; want some only when the ring cannot reach back", reloads, tc.ring)
			}
		})
	}
}

// TestResumeFromAnotherProcess: an id this process did not give out
// (a restarted server) starts the stream with a reload event, on the
// streams of every run and of one run alike: nothing the server can
// replay, and no run read on the client's behalf.
func TestResumeFromAnotherProcess(t *testing.T) {
	f := newFixture(t)
	want := submitGreets(t, f, "old", 5)
	st, err := f.c.EventsSince(f.ctx, "someotherepoch-42")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if reloads := readUntilAllSucceeded(t, f, st, want); reloads != 1 {
		t.Fatalf("%d reload events; want the stream to start with one", reloads)
	}
	rs, err := f.c.RunEventsSince(f.ctx, "old-000", "someotherepoch-42")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var names []string
	for {
		ev, err := rs.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, ev.Name)
	}
	if strings.Join(names, " ") != "reload state" {
		t.Fatalf("a finished run's stream resumed from another process's id sent %v; want reload, state", names)
	}
}

// TestRunStreamResumes reads the start of an approval's stream, goes
// away while the run goes on, and resumes with Last-Event-ID: the step
// events it missed come first, none it had, then the state.
func TestRunStreamResumes(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "res1", Input: json.RawMessage(`{"request":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("res1", "waiting")
	st, err := f.c.RunEvents(f.ctx, "res1")
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Next(); err != nil || ev.Name != "state" || ev.ID == "" {
		t.Fatalf("first event %+v %v; want the state with an id", ev, err)
	}
	last := st.LastEventID()
	st.Close()
	if _, err := f.c.Signal(f.ctx, "approve:res1", []byte(`{"approved":true}`), true); err != nil {
		t.Fatal(err)
	}
	f.waitState("res1", "succeeded")
	st2, err := f.c.RunEventsSince(f.ctx, "res1", last)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	var names []string
	for {
		ev, err := st2.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, ev.Name)
	}
	starts, ends := 0, 0
	for _, n := range names {
		switch n {
		case "step_start":
			starts++
		case "step_end":
			ends++
		}
	}
	if starts == 0 || ends == 0 || names[len(names)-1] != "state" {
		t.Fatalf("the resumed stream sent %v; want the step events missed while away, then the state", names)
	}
	if want := len(names) - 1; starts+ends != want {
		t.Fatalf("the resumed stream sent %v; want only step events before the state", names)
	}
}

// TestResyncEventMatchesItsSchema reads a stalled stream raw: its last
// event is resync, with no id of its own (a client resumes after the
// last event it read), whose data names the last event it carried and
// matches ResyncEvent.
func TestResyncEventMatchesItsSchema(t *testing.T) {
	defer server.SetSubscriberBuffer(16)()
	f := newFixture(t)
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.srv.Handler().ServeHTTP(&stalledWriter{ResponseWriter: w, release: release}, r)
	}))
	defer hs.Close()
	defer hs.CloseClientConnections()
	resp, err := f.raw().Get(hs.URL + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	submitGreets(t, f, "rs", 40)
	close(release)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	last := events[len(events)-1]
	var name, id, data, prevID string
	for _, line := range strings.Split(last, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "event":
			name = v
		case "id":
			id = v
		case "data":
			data = v
		}
	}
	if name != "resync" {
		t.Fatalf("the stalled stream ended with %q, want a resync event:\n%s", name, b)
	}
	f.conf.checkSchema(t, "ResyncEvent", []byte(data))
	var rd struct {
		LastEventID string `json:"last_event_id"`
	}
	if err := json.Unmarshal([]byte(data), &rd); err != nil || id != "" {
		t.Fatalf("resync data %s (%v), id %q; want no id of its own", data, err, id)
	}
	for _, line := range strings.Split(events[len(events)-2], "\n") {
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			prevID = v
		}
	}
	if prevID != rd.LastEventID {
		t.Fatalf("resync names %q but the last event it followed was %q", rd.LastEventID, prevID)
	}
}
