package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	t     *testing.T
	store objstore.Store
	clock *clock.Mock
	opts  Options
	q     *Queue
}

// seededEntropy makes job IDs reproducible.
type seededEntropy struct{ r *rand.Rand }

func (s seededEntropy) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(s.r.Uint32())
	}
	return len(p), nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFixture(t *testing.T, mod func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, store: mem.New(), clock: clock.NewMock(t0)}
	f.opts = Options{
		Clock:         f.clock,
		DefaultConfig: QueueConfig{MaxAttempts: 3, LeaseDuration: 10 * time.Second, BackoffBase: time.Second, BackoffMax: 8 * time.Second},
		ReapInterval:  time.Second,
		SweepInterval: -1,
		Entropy:       seededEntropy{rand.New(rand.NewPCG(1, 2))},
		Logger:        quietLogger(),
	}
	if mod != nil {
		mod(&f.opts)
	}
	f.open()
	t.Cleanup(func() {
		if f.q != nil {
			_ = f.q.Close()
		}
	})
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	q, err := Open(context.Background(), f.store, f.opts)
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	f.q = q
}

// reopen closes the queue cleanly and opens it again.
func (f *fixture) reopen() {
	f.t.Helper()
	if err := f.q.Close(); err != nil {
		f.t.Fatalf("Close: %v", err)
	}
	f.open()
}

// crash abandons the queue without closing it and opens a new writer on
// the same store, which fences the old one: commits not yet in a WAL
// object are lost, as in a process crash.
func (f *fixture) crash() {
	f.t.Helper()
	old := f.q
	f.open()
	_ = old.Close() // fenced: closes without writing
}

func (f *fixture) enqueue(queue, payload string, opts EnqueueOptions) string {
	f.t.Helper()
	res, err := f.q.Enqueue(context.Background(), queue, []byte(payload), opts)
	if err != nil {
		f.t.Fatalf("Enqueue: %v", err)
	}
	if res.Duplicate {
		f.t.Fatalf("Enqueue %q: unexpected duplicate of %s", payload, res.ID)
	}
	return res.ID
}

func (f *fixture) claim(queue string) *Claim {
	f.t.Helper()
	c, err := f.q.Claim(context.Background(), queue)
	if err != nil {
		f.t.Fatalf("Claim: %v", err)
	}
	if c == nil {
		f.t.Fatalf("Claim(%q): nothing ready", queue)
	}
	return c
}

func (f *fixture) noClaim(queue string) {
	f.t.Helper()
	c, err := f.q.Claim(context.Background(), queue)
	if err != nil {
		f.t.Fatalf("Claim: %v", err)
	}
	if c != nil {
		f.t.Fatalf("Claim(%q): got job %s (%q), want nothing ready", queue, c.Job.ID, c.Job.Payload)
	}
}

func (f *fixture) stats(queue string) Stats {
	f.t.Helper()
	s, err := f.q.Stats(context.Background(), queue)
	if err != nil {
		f.t.Fatalf("Stats: %v", err)
	}
	return s
}

func (f *fixture) wantStats(queue string, want Stats) {
	f.t.Helper()
	if got := f.stats(queue); got != want {
		f.t.Fatalf("Stats(%q) = %+v, want %+v", queue, got, want)
	}
}

func (f *fixture) job(id string) Job {
	f.t.Helper()
	j, err := f.q.GetJob(context.Background(), id)
	if err != nil {
		f.t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

func (f *fixture) kvGet(key string) (string, bool) {
	f.t.Helper()
	v, err := f.q.KVGet(context.Background(), key)
	if errors.Is(err, ErrNotFound) {
		return "", false
	}
	if err != nil {
		f.t.Fatalf("KVGet(%q): %v", key, err)
	}
	return string(v), true
}

type pass struct {
	name string
	at   time.Time
}

// passes reports the background passes (reap, schedule, sweep) of f.q.
func (f *fixture) passes() chan pass {
	ch := make(chan pass, 4096)
	hook := func(name string, at time.Time) {
		select {
		case ch <- pass{name, at}:
		default:
		}
	}
	f.q.passHook.Store(&hook)
	return ch
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func prio(p int) *int { return &p }

func TestEnqueueClaimAck(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	id := f.enqueue("q", "hello", EnqueueOptions{Headers: map[string]string{"h": "v"}})
	f.wantStats("q", Stats{Pending: 1})
	j := f.job(id)
	if j.State != StatePending || string(j.Payload) != "hello" || j.Headers["h"] != "v" || !j.EnqueuedAt.Equal(t0) || j.MaxAttempts != 3 {
		t.Fatalf("job after enqueue = %+v", j)
	}
	f.clock.Advance(time.Second)
	c := f.claim("q")
	if c.Job.ID != id || c.Job.Attempts != 1 || c.Job.State != StateClaimed || !c.Job.ClaimedAt.Equal(t0.Add(time.Second)) || string(c.Job.Payload) != "hello" {
		t.Fatalf("claimed job = %+v", c.Job)
	}
	f.wantStats("q", Stats{Claimed: 1})
	f.noClaim("q")
	if err := f.q.Ack(ctx, c, nil); err != nil {
		t.Fatal(err)
	}
	f.wantStats("q", Stats{})
	if _, err := f.q.GetJob(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetJob after ack without retention: err = %v, want ErrNotFound", err)
	}
	if err := f.q.Ack(ctx, c, nil); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("second Ack: err = %v, want ErrClaimLost", err)
	}
}

func TestPriorityThenFIFO(t *testing.T) {
	f := newFixture(t, nil)
	var want []string
	lo := []string{f.enqueue("q", "lo1", EnqueueOptions{Priority: prio(-1)}), f.enqueue("q", "lo2", EnqueueOptions{Priority: prio(-1)})}
	mid := []string{f.enqueue("q", "mid1", EnqueueOptions{}), f.enqueue("q", "mid2", EnqueueOptions{})}
	hi := []string{f.enqueue("q", "hi1", EnqueueOptions{Priority: prio(7)}), f.enqueue("q", "hi2", EnqueueOptions{Priority: prio(7)})}
	want = append(append(append(want, hi...), mid...), lo...)
	pending, err := f.q.ListJobs(ctxT(t), "q", StatePending, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range pending {
		if j.ID != want[i] {
			t.Fatalf("ListJobs pending[%d] = %s (%s), want %s", i, j.ID, j.Payload, want[i])
		}
	}
	cs, err := f.q.ClaimBatch(ctxT(t), "q", 4)
	if err != nil {
		t.Fatal(err)
	}
	c5 := f.claim("q")
	c6 := f.claim("q")
	cs = append(cs, c5, c6)
	for i, c := range cs {
		if c.Job.ID != want[i] {
			t.Fatalf("claim %d = %q, want %s", i, c.Job.Payload, want[i])
		}
	}
	f.noClaim("q")
}

func TestQueuesAreSeparate(t *testing.T) {
	f := newFixture(t, nil)
	f.enqueue("a", "x", EnqueueOptions{})
	f.noClaim("b")
	f.noClaim("a\x01")
	if c := f.claim("a"); string(c.Job.Payload) != "x" {
		t.Fatalf("payload %q", c.Job.Payload)
	}
}

func TestValidation(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	cases := []struct {
		name string
		err  error
		call func() error
	}{
		{"empty queue", ErrInvalid, func() error { _, err := f.q.Enqueue(ctx, "", nil, EnqueueOptions{}); return err }},
		{"NUL in queue", ErrInvalid, func() error { _, err := f.q.Enqueue(ctx, "a\x00b", nil, EnqueueOptions{}); return err }},
		{"negative attempts", ErrInvalid, func() error { _, err := f.q.Enqueue(ctx, "q", nil, EnqueueOptions{MaxAttempts: -1}); return err }},
		{"big payload", ErrTooLarge, func() error {
			_, err := f.q.Enqueue(ctx, "q", make([]byte, MaxPayloadSize+1), EnqueueOptions{})
			return err
		}},
		{"big KV value", ErrTooLarge, func() error { return f.q.KVPut(ctx, "k", make([]byte, MaxKVValueSize+1)) }},
		{"empty KV key", ErrInvalid, func() error { return f.q.KVPut(ctx, "", nil) }},
		{"big wake payload", ErrTooLarge, func() error {
			_, err := f.q.WakeScheduled(ctx, "x", make([]byte, MaxKVValueSize+1))
			return err
		}},
		{"bad state", ErrInvalid, func() error { _, err := f.q.ListJobs(ctx, "q", "nope", "", 0); return err }},
		{"bad effects", ErrInvalid, func() error {
			_, err := f.q.Cancel(ctx, "x", &SettlementEffects{KVDeletes: []string{""}})
			return err
		}},
		{"zero batch", ErrInvalid, func() error { _, err := f.q.ClaimBatch(ctx, "q", 0); return err }},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.err) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.err)
		}
	}
	f.wantStats("q", Stats{})
}

func TestCallerChosenIDIsIdempotent(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	f.enqueue("q", "one", EnqueueOptions{ID: "job-1"})
	res, err := f.q.EnqueueWithKV(ctx, "q", []byte("two"), EnqueueOptions{ID: "job-1"}, []KVWrite{{"k", []byte("v")}})
	if err != nil || !res.Duplicate || res.ID != "job-1" {
		t.Fatalf("second enqueue = %+v, %v", res, err)
	}
	if _, ok := f.kvGet("k"); ok {
		t.Fatal("a duplicate enqueue wrote its KV puts")
	}
	if j := f.job("job-1"); string(j.Payload) != "one" {
		t.Fatalf("payload %q", j.Payload)
	}
	f.wantStats("q", Stats{Pending: 1})
}

func TestEnqueueWithKVAndBatch(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	res, err := f.q.EnqueueWithKV(ctx, "q", []byte("p"), EnqueueOptions{DedupKey: "d"}, []KVWrite{{"rec", []byte("1")}})
	if err != nil || res.Duplicate {
		t.Fatal(res, err)
	}
	if v, _ := f.kvGet("rec"); v != "1" {
		t.Fatalf("kv rec = %q", v)
	}
	// A dedup hit writes neither the job nor the KV entries.
	res2, err := f.q.EnqueueWithKV(ctx, "q", []byte("p2"), EnqueueOptions{DedupKey: "d"}, []KVWrite{{"rec", []byte("2")}, {"other", []byte("x")}})
	if err != nil || !res2.Duplicate || res2.ID != res.ID {
		t.Fatalf("dedup hit = %+v, %v", res2, err)
	}
	if v, _ := f.kvGet("rec"); v != "1" {
		t.Fatalf("kv rec after dedup hit = %q", v)
	}
	if _, ok := f.kvGet("other"); ok {
		t.Fatal("dedup hit wrote KV")
	}
	// Batch: atomic, dedup within the batch and against stored jobs.
	rs, err := f.q.EnqueueBatch(ctx, []NewJob{
		{Queue: "q", Payload: []byte("b1"), Options: EnqueueOptions{DedupKey: "e"}},
		{Queue: "q", Payload: []byte("b2"), Options: EnqueueOptions{DedupKey: "e"}},
		{Queue: "q", Payload: []byte("b3"), Options: EnqueueOptions{DedupKey: "d"}},
		{Queue: "r", Payload: []byte("b4")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Duplicate || !rs[1].Duplicate || rs[1].ID != rs[0].ID || !rs[2].Duplicate || rs[2].ID != res.ID || rs[3].Duplicate {
		t.Fatalf("batch results %+v", rs)
	}
	f.wantStats("q", Stats{Pending: 2})
	f.wantStats("r", Stats{Pending: 1})
	// An invalid job fails the whole batch.
	if _, err := f.q.EnqueueBatch(ctx, []NewJob{{Queue: "q", Payload: []byte("ok")}, {Queue: ""}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad batch err = %v", err)
	}
	f.wantStats("q", Stats{Pending: 2})
}

func TestDedupLifetime(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	dup := func(want bool, wantID string) string {
		t.Helper()
		res, err := f.q.Enqueue(ctx, "q", nil, EnqueueOptions{DedupKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate != want || (want && res.ID != wantID) {
			t.Fatalf("enqueue with key: %+v, want duplicate=%v of %s", res, want, wantID)
		}
		return res.ID
	}
	// Holds while scheduled.
	a := f.enqueue("q", "a", EnqueueOptions{DedupKey: "k", RunAt: t0.Add(time.Minute)})
	dup(true, a)
	// Holds while pending (after a wake).
	if out, err := f.q.WakeScheduled(ctx, a, nil); err != nil || out != Woken {
		t.Fatal(out, err)
	}
	dup(true, a)
	// Released at claim: a new job may take the key.
	ca := f.claim("q")
	b := dup(false, "")
	// a's nack cannot take the key back while b holds it.
	if _, err := f.q.Nack(ctx, ca, "x", nil); err != nil {
		t.Fatal(err)
	}
	dup(true, b)
	// Cancel of b (pending) releases the key, and a (scheduled) takes it
	// back only when it returns to pending or scheduled again; a fresh job
	// takes it now.
	if res, err := f.q.Cancel(ctx, b, nil); err != nil || res != CancelRemoved {
		t.Fatal(res, err)
	}
	c := dup(false, "")
	// Ack releases nothing more (key was released at claim); dead jobs hold nothing.
	cc := f.claim("q")
	if cc.Job.ID != c {
		t.Fatalf("claimed %s, want %s", cc.Job.ID, c)
	}
	if err := f.q.DeadLetter(ctx, cc, "boom", nil); err != nil {
		t.Fatal(err)
	}
	d := dup(false, "")
	// Requeueing the dead job does not steal the key from d.
	if err := f.q.RequeueDead(ctx, c); err != nil {
		t.Fatal(err)
	}
	dup(true, d)
}

func TestNackBackoffSchedule(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.DefaultConfig = QueueConfig{MaxAttempts: 6, LeaseDuration: time.Hour, BackoffBase: time.Second, BackoffMax: 5 * time.Second}
	})
	ctx := ctxT(t)
	id := f.enqueue("q", "x", EnqueueOptions{})
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	c := f.claim("q")
	for i, d := range want {
		if c.Job.Attempts != i+1 {
			t.Fatalf("attempt %d: Attempts = %d", i+1, c.Job.Attempts)
		}
		res, err := f.q.Nack(ctx, c, fmt.Sprintf("fail %d", i+1), nil)
		if err != nil {
			t.Fatal(err)
		}
		now := f.clock.Now()
		if res.Dead || !res.RunAt.Equal(now.Add(d)) {
			t.Fatalf("nack %d: %+v, want RunAt now+%s", i+1, res, d)
		}
		j := f.job(id)
		if j.State != StateScheduled || !j.RunAt.Equal(now.Add(d)) || j.LastError != fmt.Sprintf("fail %d", i+1) {
			t.Fatalf("after nack %d: %+v", i+1, j)
		}
		// Not due a nanosecond early (no timer fires, a manual pass finds
		// nothing); the scheduler promotes it at RunAt.
		f.clock.Advance(d - 1)
		if n, err := f.q.PromoteDue(ctx); err != nil || n != 0 {
			t.Fatalf("promote early: %d, %v", n, err)
		}
		f.noClaim("q")
		f.clock.Advance(1)
		if c, err = f.q.ClaimWait(ctx, "q"); err != nil || c.Job.ID != id {
			t.Fatalf("ClaimWait after RunAt: %v, %v", c, err)
		}
	}
	res, err := f.q.Nack(ctx, c, "last", &SettlementEffects{KVPuts: []KVWrite{{"dead", []byte("1")}}})
	if err != nil || !res.Dead {
		t.Fatalf("last nack: %+v, %v", res, err)
	}
	if v, ok := f.kvGet("dead"); !ok || v != "1" {
		t.Fatal("effects of an attempt-exhausting nack not applied")
	}
	j := f.job(id)
	if j.State != StateDead || j.LastError != "last" || j.Attempts != 6 {
		t.Fatalf("dead job %+v", j)
	}
	hist, err := f.q.Attempts(ctx, id)
	if err != nil || len(hist) != 6 || hist[5].Outcome != "nacked" || hist[0].Error != "fail 1" || hist[0].N != 1 {
		t.Fatalf("history %+v, %v", hist, err)
	}
	f.wantStats("q", Stats{Dead: 1})
}

func TestBackoffFormula(t *testing.T) {
	c := QueueConfig{BackoffBase: 100 * time.Millisecond, BackoffMax: time.Minute}.withDefaults()
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 5: 1600 * time.Millisecond, 10: 51200 * time.Millisecond, 11: time.Minute, 200: time.Minute} {
		if got := c.backoff(n); got != want {
			t.Errorf("backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestKV(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.q.KVGet(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	ok, err := f.q.KVCompareAndPut(ctx, "a", nil, []byte("1"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, _ := f.q.KVCompareAndPut(ctx, "a", nil, []byte("2")); ok {
		t.Fatal("CompareAndPut(absent) wrote over an existing key")
	}
	if ok, _ := f.q.KVCompareAndPut(ctx, "a", []byte("x"), []byte("2")); ok {
		t.Fatal("CompareAndPut with a wrong expected value wrote")
	}
	if ok, _ := f.q.KVCompareAndPut(ctx, "a", []byte("1"), []byte("2")); !ok {
		t.Fatal("CompareAndPut with the right expected value did not write")
	}
	if ok, _ := f.q.KVCompareAndDelete(ctx, "a", []byte("1")); ok {
		t.Fatal("CompareAndDelete with a wrong value deleted")
	}
	if ok, _ := f.q.KVCompareAndDelete(ctx, "a", []byte("2")); !ok {
		t.Fatal("CompareAndDelete with the right value did not delete")
	}
	if _, ok := f.kvGet("a"); ok {
		t.Fatal("key still there")
	}
	if _, err := f.q.KVCompareAndDelete(ctx, "a", nil); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	for i := range 25 {
		if err := f.q.KVPut(ctx, fmt.Sprintf("p/%02d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"o", "q", "p"} {
		if err := f.q.KVPut(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for {
		page, err := f.q.KVScan(ctx, "p/", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			got = append(got, e.Key)
			if e.Value[0] != byte(len(got)-1) {
				t.Fatalf("value of %s = %v", e.Key, e.Value)
			}
		}
		after = page[len(page)-1].Key
	}
	if len(got) != 25 || got[0] != "p/00" || got[24] != "p/24" {
		t.Fatalf("scan got %v", got)
	}
	if err := f.q.KVDelete(ctx, "p/03"); err != nil {
		t.Fatal(err)
	}
	all, _ := f.q.KVScan(ctx, "", "", 1000)
	if len(all) != 27 {
		t.Fatalf("full scan: %d entries", len(all))
	}
	// Returned values are copies.
	v, _ := f.q.KVGet(ctx, "q")
	v[0] = 'z'
	if w, _ := f.kvGet("q"); w != "q" {
		t.Fatal("KVGet returned the kv's own buffer")
	}
	// The caller KV namespace does not see queue keys.
	f.enqueue("q", "x", EnqueueOptions{})
	all, _ = f.q.KVScan(ctx, "", "", 1000)
	if len(all) != 27 {
		t.Fatalf("scan sees queue keys: %d entries", len(all))
	}
	f.reopen()
	if w, _ := f.kvGet("p/24"); w != string([]byte{24}) {
		t.Fatal("KV lost over reopen")
	}
}

func TestLargePayload(t *testing.T) {
	f := newFixture(t, nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB, over the kv's 64 KiB threshold
	id := f.enqueue("q", string(big), EnqueueOptions{})
	f.reopen()
	c := f.claim("q")
	if c.Job.ID != id || !bytes.Equal(c.Job.Payload, big) {
		t.Fatal("large payload changed over reopen and claim")
	}
	if err := f.q.Ack(ctxT(t), c, nil); err != nil {
		t.Fatal(err)
	}
}

func TestClosed(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	if err := f.q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.q.Enqueue(ctx, "q", nil, EnqueueOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	if _, err := f.q.ClaimWait(ctx, "q"); !errors.Is(err, ErrClosed) {
		t.Fatalf("ClaimWait after Close: %v", err)
	}
	if _, err := f.q.Stats(ctx, "q"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats after Close: %v", err)
	}
	f.q = nil
}

// TestKVScanDesc pages a prefix from its greatest key down, without keys
// of neighbouring prefixes, and an empty cursor means from the end.
func TestKVScanDesc(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for i := range 25 {
		if err := f.q.KVPut(ctx, fmt.Sprintf("p/%02d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"o", "q", "p", "p0"} {
		if err := f.q.KVPut(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	before := ""
	for {
		page, err := f.q.KVScanDesc(ctx, "p/", before, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			got = append(got, e.Key)
			if want := byte(25 - len(got)); e.Value[0] != want {
				t.Fatalf("value of %s = %v, want %d", e.Key, e.Value, want)
			}
		}
		before = page[len(page)-1].Key
	}
	if len(got) != 25 || got[0] != "p/24" || got[24] != "p/00" {
		t.Fatalf("descending scan got %v", got)
	}
	if page, err := f.q.KVScanDesc(ctx, "p/", "p/", 10); err != nil || len(page) != 0 {
		t.Fatalf("scan before the prefix itself: %v, %v; want nothing", page, err)
	}
	if page, err := f.q.KVScanDesc(ctx, "p/", "z", 1); err != nil || len(page) != 1 || page[0].Key != "p/24" {
		t.Fatalf("scan before a key past the prefix: %v, %v; want p/24", page, err)
	}
}
