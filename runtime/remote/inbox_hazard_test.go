package remote

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// logRecorder is a slog.Handler that keeps the messages and attributes
// of warnings and errors.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelWarn }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler             { return l }
func (l *logRecorder) WithGroup(string) slog.Handler                  { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}

// count returns how many recorded lines contain every one of subs.
func (l *logRecorder) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// TestInboxLeavesForeignObjects puts objects no Client wrote under the
// inbox prefix (a user's files, a JSON record that happens to carry its
// name as id) next to a real command: the writer applies the command and
// leaves every other object as it was, warning about each once.
func TestInboxLeavesForeignObjects(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	logs := &logRecorder{}
	// The inbox's store requests go through the counter; the queue's kv
	// uses store directly.
	counted := counting.New(store)
	rt, err := runtime.New(w.q, counted, w.runner, runtime.Options{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	foreign := map[string]string{
		"inbox/report.pdf":                 "%PDF-1.7 binary",
		"inbox/2026/notes.txt":             "nested",
		"inbox/01JABCDEFGHJKMNPQRSTVWXYZ0": `{"v":1,"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","kind":"signal","key":"k","payload":"eA=="}`,
		"inbox/garbage":                    "{not json",
	}
	before := map[string]objstore.ObjectInfo{}
	for k, v := range foreign {
		info, err := store.Put(ctx, k, []byte(v), objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[k] = info
	}
	id := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "real", Payload: []byte("p")})
	ib, err := newInbox(rt, InboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 3; pass++ {
		counted.Reset()
		n, err := ib.drain(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if want := 1 - min(pass, 1); n != want {
			t.Fatalf("pass %d handled %d commands, want %d", pass, n, want)
		}
		// Once known, an object that is not a command costs nothing
		// beyond the LIST.
		if c := counted.Counts(); pass > 0 && c.Total() != 1 {
			t.Fatalf("pass %d made %d requests (%+v); want only the LIST", pass, c.Total(), c)
		}
	}
	if a, ok := ibxAnswer(t, store, id); !ok || a.Code != "" || a.Signal != signal.Buffered.String() {
		t.Fatalf("the real command's answer = %+v, %v; want buffered", a, ok)
	}
	if w.kv(sigBufKey("k")) != nil {
		t.Error("a JSON object no Client wrote was applied as a signal")
	}
	for k, v := range foreign {
		b, info, err := store.Get(ctx, k)
		if err != nil {
			t.Errorf("the writer removed %s, which it did not write: %v", k, err)
			continue
		}
		if string(b) != v || info.ETag != before[k].ETag {
			t.Fatalf("the writer changed %s: %q", k, b)
		}
		if _, ok := ibxAnswer(t, store, strings.TrimPrefix(k, "inbox/")); ok && !strings.Contains(k, "/2026/") {
			t.Fatalf("the writer answered %s, which no Client wrote", k)
		}
		if n := logs.count("not an inbox command", "key="+k); n != 1 {
			t.Errorf("%d warnings naming %s over three passes; want exactly one", n, k)
		}
	}
}

// TestInboxRefusesOverlappingPrefixes checks that an inbox whose prefix
// is the queue's kv store is refused before it touches the store (it
// used to take the kv's manifest and WAL objects for foreign commands and
// delete them), and that New refuses a memo prefix inside another
// component's.
func TestInboxRefusesOverlappingPrefixes(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	if err := w.q.KVPut(ctx, "app/x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	kvObjects := ibxKeys(t, store, "queue/")
	if len(kvObjects) == 0 {
		t.Fatal("the queue wrote no object")
	}
	for _, prefix := range []string{"queue", "queue/inbox", "Queue"} {
		_, err := DrainInbox(ctx, w.rt, InboxOptions{Prefix: prefix})
		if !errors.Is(err, objstore.ErrNamespaceOverlap) || !strings.Contains(err.Error(), `"queue/" (the queue's kv store`) ||
			!strings.Contains(err.Error(), `"`+prefix+`/" (inbox commands, InboxOptions.Prefix)`) {
			t.Errorf("DrainInbox with prefix %q = %v; want objstore.ErrNamespaceOverlap naming both prefixes", prefix, err)
		}
		if err := ServeInbox(ctx, w.rt, InboxOptions{Prefix: prefix}); !errors.Is(err, objstore.ErrNamespaceOverlap) {
			t.Errorf("ServeInbox with prefix %q = %v; want objstore.ErrNamespaceOverlap", prefix, err)
		}
	}
	if got := ibxKeys(t, store, "queue/"); strings.Join(got, " ") != strings.Join(kvObjects, " ") {
		t.Fatalf("the kv's objects %v became %v", kvObjects, got)
	}
	for _, memo := range []string{"queue", "queue/memo", "writer-lease", "tqw-writer.lock"} {
		if _, err := runtime.New(w.q, store, w.runner, runtime.Options{MemoPrefix: memo}); !errors.Is(err, objstore.ErrNamespaceOverlap) {
			t.Errorf("New with Options.MemoPrefix %q = %v; want objstore.ErrNamespaceOverlap", memo, err)
		}
	}
	// New checks against the prefix the queue was opened with.
	if _, err := runtime.New(w.q, store, w.runner, runtime.Options{MemoPrefix: w.q.Prefix() + "/memo"}); !errors.Is(err, objstore.ErrNamespaceOverlap) {
		t.Errorf("New with the memo inside the queue's prefix %q = %v; want objstore.ErrNamespaceOverlap", w.q.Prefix(), err)
	}
	// Namespaces of other components sharing the store.
	interp := runtime.Options{StoreNamespaces: []objstore.Namespace{{Owner: "workflow definitions", Prefix: "tqw/defs"}}}
	overMemo := interp
	overMemo.MemoPrefix = "tqw"
	if _, err := runtime.New(w.q, store, w.runner, overMemo); !errors.Is(err, objstore.ErrNamespaceOverlap) ||
		!strings.Contains(err.Error(), `"tqw/defs/" (workflow definitions)`) {
		t.Errorf("New with the memo over a declared namespace = %v; want objstore.ErrNamespaceOverlap naming it", err)
	}
	// The inbox is checked when it is built, against the memo too.
	for _, memo := range []string{"inbox", "inbox-answers"} {
		rt, err := runtime.New(w.q, store, w.runner, runtime.Options{MemoPrefix: memo})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DrainInbox(ctx, rt, InboxOptions{}); !errors.Is(err, objstore.ErrNamespaceOverlap) {
			t.Errorf("DrainInbox with Options.MemoPrefix %q = %v; want objstore.ErrNamespaceOverlap", memo, err)
		}
	}
	rt, err := runtime.New(w.q, store, w.runner, interp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DrainInbox(ctx, rt, InboxOptions{Prefix: "tqw"}); !errors.Is(err, objstore.ErrNamespaceOverlap) {
		t.Errorf("DrainInbox over a declared namespace = %v; want objstore.ErrNamespaceOverlap", err)
	}
	if _, err := DrainInbox(ctx, rt, InboxOptions{Prefix: "tqw-inbox"}); err != nil {
		t.Errorf("DrainInbox with a prefix that only starts like another = %v; want it accepted", err)
	}
}

// TestInboxAnswersOnlyDurableOutcomes stages a submission whose commit
// cannot become durable (every WAL PUT hangs): a pass that gives up when
// its context ends leaves the commit visible but not durable, and a later
// pass must not answer from that state. The test then loses the commit
// (a new writer fences this one) and checks that no answer claims it.
func TestInboxAnswersOnlyDurableOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		base := mem.New()
		fs := faults.New(base, 1)
		q, err := queue.Open(ctx, fs, queue.Options{Logger: ibxLogger(), SweepInterval: -1,
			KV: kv.Options{RequestTimeout: 100 * time.Millisecond, CloseTimeout: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := runtime.New(q, fs, runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) { return runtime.Succeed(nil), nil }),
			runtime.Options{Logger: ibxLogger()})
		if err != nil {
			t.Fatal(err)
		}
		id := ibxSend(t, base, inboxCommand{Kind: CommandSubmit, RunID: "r1", Input: []byte("in")})
		fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Hang: true, Rate: 1})
		for pass := 0; pass < 2; pass++ {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			_, _ = DrainInbox(dctx, rt, InboxOptions{})
			cancel()
		}
		ans, answered := ibxAnswer(t, base, id)

		// The writer dies; the next one sees only what is durable.
		next := ibxOpen(t, base, clock.NewMock(ibxStart), nil)
		defer next.q.Close()
		_ = q.Close()
		durable := next.kv(runKey("r1")) != nil
		if answered && ans.Code == "" && ans.NewlySubmitted && !durable {
			t.Fatalf("the writer answered %+v for run r1, which did not survive the writer: the answer came before the commit was durable", ans)
		}
	})
}

// TestInboxUncertainIsNotRejection gives up on a Cancel after its request
// was recorded (the run's step pointer does not decode): the command had
// effects, so the answer must not be a rejection.
func TestInboxUncertainIsNotRejection(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	if _, err := w.rt.Submit(ctx, runtime.RunSpec{RunID: "r1", Input: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if err := w.q.KVPut(ctx, stepKey("r1"), []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	id := ibxSend(t, store, inboxCommand{Kind: CommandCancel, RunID: "r1"})
	if _, err := DrainInbox(ctx, w.rt, InboxOptions{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if w.kv(cancelKey("r1")) == nil {
		t.Fatal("the cancel request was not recorded; the test stages nothing")
	}
	a, ok := ibxAnswer(t, store, id)
	if !ok {
		t.Fatal("no answer after the last attempt")
	}
	if a.Code != "uncertain" {
		t.Fatalf("answer %q (%s) to a cancel whose request was recorded; want uncertain", a.Code, a.Error)
	}
	if !bytes.Contains([]byte(a.Error), []byte("corrupt")) {
		t.Fatalf("the uncertain answer does not say why: %q", a.Error)
	}
	// Parked: the command and its marker stay for the client to resolve.
	if keys := ibxKeys(t, store, "inbox/"); len(keys) != 1 || w.kv(inboxMarkerKey(id)) == nil {
		t.Fatalf("after an uncertain answer the inbox holds %v and the marker is %q; want the command and its marker kept", keys, w.kv(inboxMarkerKey(id)))
	}
}

// TestInboxSweepLeavesForeignAnswers checks that the answer sweep deletes
// only expired answers it can prove are the inbox's, and that a command
// whose answer's name is taken by a foreign object is neither applied nor
// removed.
func TestInboxSweepLeavesForeignAnswers(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	clock := clock.NewMock(time.Now())
	ib, err := newInbox(w.rt, InboxOptions{Clock: clock, AnswerTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	answered := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k"})
	blocked := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "blocked"})
	foreign := map[string]string{
		"inbox-answers/user.txt":   "mine",
		"inbox-answers/01JFOREIGN": `{"v":1,"id":"01JFOREIGN"}`,
		"inbox-answers/" + blocked: "a user's object that happens to have the name",
	}
	for k, v := range foreign {
		if _, err := store.Put(ctx, k, []byte(v), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ib.drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := ibxAnswer(t, store, answered); !ok {
		t.Fatal("the command was not answered")
	}
	if w.kv(sigBufKey("blocked")) != nil {
		t.Fatal("a command whose answer's name is taken was applied")
	}
	if keys := ibxKeys(t, store, "inbox/"); len(keys) != 1 || keys[0] != "inbox/"+blocked {
		t.Fatalf("inbox holds %v; want the blocked command kept", keys)
	}
	clock.Advance(2 * time.Hour)
	if err := ib.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := ibxAnswer(t, store, answered); ok {
		t.Fatal("an expired answer was kept")
	}
	for k, v := range foreign {
		if b, _, err := store.Get(ctx, k); err != nil || string(b) != v {
			t.Errorf("the sweep changed or removed %s, which is not an answer: %q, %v", k, b, err)
		}
	}
}

// InboxWaiting counts real commands only: objects that are not commands
// (which the server leaves alone) do not keep a worker from going idle.
func TestInboxWaitingIgnoresForeignObjects(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	for k, v := range map[string]string{
		"inbox/report.pdf":                 "%PDF-1.7 binary",
		"inbox/01JABCDEFGHJKMNPQRSTVWXYZ0": `{"v":1,"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","kind":"signal","key":"k"}`,
	} {
		if _, err := store.Put(ctx, k, []byte(v), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if waiting, err := InboxWaiting(ctx, w.rt, InboxOptions{}); err != nil || waiting {
		t.Fatalf("InboxWaiting with foreign objects only = %v, %v; want false", waiting, err)
	}
	ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "real", Payload: []byte("p")})
	if waiting, err := InboxWaiting(ctx, w.rt, InboxOptions{}); err != nil || !waiting {
		t.Fatalf("InboxWaiting with a command = %v, %v; want true", waiting, err)
	}
}

// A submission that reaches the writer after its run was submitted again
// by another path and ended (its sender died before the writer applied
// it) starts nothing: the run's steps must not run twice while its
// result is retained.
func TestInboxLateSubmitOfAnEndedRunStartsNothing(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	var steps atomic.Int32
	w := ibxOpen(t, store, nil, runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) {
		steps.Add(1)
		return runtime.Succeed(nil), nil
	}))
	defer w.q.Close()
	id := ibxSend(t, store, inboxCommand{Kind: CommandSubmit, RunID: "late", Input: []byte("in")})
	// Meanwhile the run is submitted and works to its end in process.
	if _, err := w.rt.Submit(ctx, runtime.RunSpec{RunID: "late", Input: []byte("in")}); err != nil {
		t.Fatal(err)
	}
	wk := w.rt.Spawn(ctx)
	for {
		st, err := w.rt.Status(ctx, "late")
		if err == nil && st.State.Terminal() {
			break
		}
		yield()
	}
	if err := wk.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := DrainInbox(ctx, w.rt, InboxOptions{}); err != nil || n != 1 {
		t.Fatalf("DrainInbox = %d, %v; want the late command handled", n, err)
	}
	a, ok := ibxAnswer(t, store, id)
	if !ok || a.Code != "" || a.NewlySubmitted {
		t.Fatalf("answer %+v; want a duplicate (not newly submitted)", a)
	}
	st, err := w.rt.Status(ctx, "late")
	if err != nil || !st.State.Terminal() {
		t.Fatalf("status after the late submit = %+v, %v; want still ended", st, err)
	}
	if n := steps.Load(); n != 1 {
		t.Fatalf("the run's step ran %d times; want once", n)
	}
}
