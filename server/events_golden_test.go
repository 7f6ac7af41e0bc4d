package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/server/client"
)

// The event stream's bytes as today's server writes them, from fixed
// events: step_start, step_end, state, run and reload events, and the
// resync that ends a stream that fell behind. Clients of other builds
// parse them, so a change of an event's framing or JSON fails
// TestGoldenEventStream; see docs/STORE-LAYOUT.md, "Fixtures".

var (
	goldenStreamPath = filepath.Join("testdata", "golden", "events.v1.txt")
	goldenStart      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	goldenEnd        = time.Date(2026, 1, 2, 3, 4, 6, 500000000, time.UTC)
)

func goldenStepEvents() (start, end interpreter.Event) {
	start = interpreter.Event{Time: goldenStart, RunID: "order-7", Step: "fetch", Kind: "start", Attempt: 2, Job: "01JGZ0000000000000000000JB"}
	end = interpreter.Event{Time: goldenEnd, RunID: "order-7", Step: "fetch", Kind: "end", Attempt: 2, Status: interpreter.OutcomeRetry,
		Elapsed: 1500 * time.Millisecond, Error: &dsl.ErrorInfo{Type: "http", Message: "503 Service Unavailable", Status: 503, Retryable: true},
		Next: "parse", Job: "01JGZ0000000000000000000JB"}
	return start, end
}

func goldenStatuses() (waiting, failed runstate.Status) {
	waiting = runstate.Status{RunID: "order-7", State: runstate.StateWaiting, Step: 3, Attempt: 1, SignalKey: "approve/order-7",
		Until: goldenEnd.Add(time.Hour), Headers: map[string]string{interpreter.HeaderWorkflow: "orders"},
		Labels: map[string]string{"workflow": "orders"}, SubmittedAt: goldenStart}
	failed = runstate.Status{RunID: "order-8", State: runstate.StateFailed, Step: 4, Error: "step 4: boom",
		Headers: map[string]string{interpreter.HeaderWorkflow: "orders"}, SubmittedAt: goldenStart, FinishedAt: goldenEnd}
	return waiting, failed
}

// goldenStream writes the events through the server's own stream writer.
func goldenStream(t *testing.T) []byte {
	ctx := context.Background()
	s := &Server{cfg: Config{Heartbeat: time.Hour}}
	b := &broker{s: s, epoch: "golden", subs: map[*subscriber]struct{}{}}
	s.events = b
	start, end := goldenStepEvents()
	waiting, failed := goldenStatuses()
	marshal := func(v any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first := []sseEvent{
		b.next("step_start", marshal(start)),
		b.next("step_end", marshal(end)),
		b.next("state", marshal(s.summary(ctx, waiting))),
		b.next("run", marshal(s.summary(ctx, failed))),
		b.reload("the server fell behind"),
	}
	// A stream whose buffer is full is ended with a resync naming the last
	// event it was queued.
	sub := &subscriber{runID: "order-7", ch: make(chan sseEvent), gone: make(chan struct{}), lastID: first[len(first)-1].id}
	send(sub, b.next("state", marshal(s.summary(ctx, waiting))))
	rec := httptest.NewRecorder()
	s.stream(rec, httptest.NewRequest(http.MethodGet, "/v1/runs/order-7/events", nil), sub, first)
	if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	return rec.Body.Bytes()
}

func TestGoldenEventStream(t *testing.T) {
	stream := golden.Check(t, goldenStreamPath, goldenStream(t))

	// Read the fixture with today's client, as a client of the stream does.
	var requests []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests = append(requests, r.Header.Get("Last-Event-ID"))
		w.Header().Set("Content-Type", "text/event-stream")
		if len(requests) == 1 {
			_, _ = w.Write(stream)
		}
	}))
	defer srv.Close()
	st, err := client.New(srv.URL, client.Options{}).RunEvents(context.Background(), "order-7")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var evs []client.Event
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	// The resync made the client reconnect after the reload event.
	if st.Resyncs != 1 || len(requests) != 2 || requests[1] != "golden-5" {
		t.Fatalf("%d resyncs, requests with Last-Event-ID %q", st.Resyncs, requests)
	}
	var names []string
	for i, ev := range evs {
		names = append(names, ev.Name)
		if want := fmt.Sprintf("golden-%d", i+1); ev.ID != want {
			t.Errorf("event %d id %q, want %q", i, ev.ID, want)
		}
	}
	if want := []string{"step_start", "step_end", "state", "run", "reload"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("events %v, want %v", names, want)
	}

	start, end := goldenStepEvents()
	for i, want := range []interpreter.Event{start, end} {
		var got interpreter.Event
		if err := json.Unmarshal(evs[i].Data, &got); err != nil {
			t.Fatal(err)
		}
		if !got.Time.Equal(want.Time) {
			t.Errorf("%s time %v, want %v", evs[i].Name, got.Time, want.Time)
		}
		got.Time = want.Time
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s decoded\n %+v\nwant\n %+v", evs[i].Name, got, want)
		}
	}

	var waiting, failed client.RunSummary
	if err := json.Unmarshal(evs[2].Data, &waiting); err != nil {
		t.Fatal(err)
	}
	if waiting.RunID != "order-7" || waiting.Workflow != "orders" || waiting.State != "waiting" || !waiting.StartedAt.Equal(goldenStart) ||
		waiting.EndedAt != nil || waiting.SignalKey != "approve/order-7" || waiting.StepNumber != 3 || waiting.Attempt != 1 ||
		waiting.Until == nil || !waiting.Until.Equal(goldenEnd.Add(time.Hour)) || waiting.Error != nil ||
		!reflect.DeepEqual(waiting.Labels, map[string]string{"workflow": "orders"}) {
		t.Errorf("state event %+v", waiting)
	}
	if err := json.Unmarshal(evs[3].Data, &failed); err != nil {
		t.Fatal(err)
	}
	if failed.RunID != "order-8" || failed.State != "failed" || failed.EndedAt == nil || !failed.EndedAt.Equal(goldenEnd) ||
		failed.Error == nil || *failed.Error != "step 4: boom" || failed.StepNumber != 4 || failed.Until != nil {
		t.Errorf("run event %+v", failed)
	}

	var reload struct{ Reason string }
	if err := json.Unmarshal(evs[4].Data, &reload); err != nil || reload.Reason != "the server fell behind" {
		t.Errorf("reload event %s: %v", evs[4].Data, err)
	}
	if !strings.Contains(string(stream), `event: resync`+"\n"+`data: {"reason":`) || !strings.Contains(string(stream), `"last_event_id":"golden-5"`) {
		t.Errorf("the stream ends without the resync event naming golden-5:\n%s", stream)
	}
}

// TestGoldenHookMarker: a signal hook's delivery-id and signature records
// (8-byte big-endian Unix ms) and their keys.
func TestGoldenHookMarker(t *testing.T) {
	v := golden.Check(t, filepath.Join("testdata", "golden", "hook-marker.v1.bin"), markerValue(goldenStart))
	if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) != goldenStart.UnixMilli() {
		t.Fatalf("marker %x", v)
	}
	keys := fmt.Sprintf("delivery %q\nsignature %q\n", hookMarkerKey("github", "delivery-1"), hookSignatureKey("github", []byte("mac")))
	golden.Check(t, filepath.Join("testdata", "golden", "hook-keys.v1.txt"), []byte(keys))
}
