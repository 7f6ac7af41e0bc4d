package remote

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// never is a polling interval no test waits out: a command answered
// while the writer and the client poll this rarely was delivered by a
// wake-up.
const never = 24 * time.Hour

// answerCounter counts the answers the writer writes, per command id.
type answerCounter struct {
	objstore.Store
	mu      sync.Mutex
	answers map[string]int
}

func (a *answerCounter) Put(ctx context.Context, key string, data []byte, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	info, err := a.Store.Put(ctx, key, data, o)
	if id, ok := strings.CutPrefix(key, "inbox-answers/"); ok && err == nil {
		a.mu.Lock()
		a.answers[id]++
		a.mu.Unlock()
	}
	return info, err
}

func (a *answerCounter) Unwrap() objstore.Store { return a.Store }

// wakeFixture is a writer serving its inbox with polling that never
// comes due, so only wake-ups deliver commands.
type wakeFixture struct {
	w      *ibxWriter
	counts *answerCounter
	stop   func()
}

func startWakeFixture(t *testing.T, store objstore.Store, opts InboxOptions) *wakeFixture {
	t.Helper()
	counts := &answerCounter{Store: store, answers: map[string]int{}}
	w := ibxOpen(t, counts, nil, signalRunner)
	ctx, cancel := context.WithCancel(context.Background())
	opts.MinInterval, opts.MaxInterval, opts.SweepEvery = never, never, never
	served := make(chan error, 1)
	go func() { served <- ServeInbox(ctx, w.rt, opts) }()
	f := &wakeFixture{w: w, counts: counts}
	var once sync.Once
	f.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("ServeInbox: %v", err)
			}
			_ = w.q.Close()
		})
	}
	t.Cleanup(f.stop)
	return f
}

// signalAll sends signals k-<client>-<i> from clients clients at once,
// each n in a row, and checks that each is buffered.
func signalAll(t *testing.T, store objstore.Store, copts ClientOptions, clients, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	copts.Logger = ibxLogger()
	copts.AnswerTimeout = 2 * time.Minute
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		keys []string
	)
	for ci := range clients {
		c, err := NewClient(store, copts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				key := fmt.Sprintf("k-%d-%d", ci, i)
				out, err := c.Signal(ctx, key, []byte("p-"+key))
				if err != nil {
					t.Errorf("Signal %s: %v (no wake-up delivered it: the writer and client poll once a day)", key, err)
					return
				}
				if out.String() != "buffered" {
					t.Errorf("Signal %s = %v, want buffered", key, out)
				}
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return keys
}

// checkOnce checks every key's signal is buffered and every command was
// answered exactly once, and the inbox is empty.
func (f *wakeFixture) checkOnce(t *testing.T, store objstore.Store, keys []string, want int) {
	t.Helper()
	if len(keys) != want {
		t.Fatalf("%d signals answered, want %d", len(keys), want)
	}
	f.awaitFinished(t, store, want)
	for _, k := range keys {
		if b := f.w.kv(sigBufKey(k)); !bufferHolds(b, "p-"+k) {
			t.Errorf("buffer of %s = %q, want its payload", k, b)
		}
	}
	f.counts.mu.Lock()
	defer f.counts.mu.Unlock()
	if len(f.counts.answers) != want {
		t.Errorf("%d commands answered, want %d", len(f.counts.answers), want)
	}
	for id, n := range f.counts.answers {
		if n != 1 {
			t.Errorf("command %s answered %d times, want once", id, n)
		}
	}
	if left := ibxKeys(t, store, "inbox/"); len(left) != 0 {
		t.Errorf("commands left in the inbox: %v", left)
	}
}

// awaitFinished waits until the writer has counted want answers and
// emptied the inbox. A client can read an answer before the writer's Put
// of it returns (and so before the count and the command's delete), so
// the last answer a client reads may still be in the writer's hands.
func (f *wakeFixture) awaitFinished(t *testing.T, store objstore.Store, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		f.counts.mu.Lock()
		n := len(f.counts.answers)
		f.counts.mu.Unlock()
		left := ibxKeys(t, store, "inbox/")
		if n >= want && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("after a minute the writer has counted %d answers (want %d) and left %d commands in the inbox: %v", n, want, len(left), left)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNotifyDeliversCommands: on a local file store, the writer is woken
// by change notification for each command and the client for each
// answer, in a row (the inbox folder is removed when emptied and
// created again, which must not end the watch) and from several clients
// at once; none is lost and none applied twice.
func TestNotifyDeliversCommands(t *testing.T) {
	store, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	// The watch looks through wrappers.
	counted := counting.New(store)
	f := startWakeFixture(t, counted, InboxOptions{BellEvery: -1})
	copts := ClientOptions{PollMin: never, PollMax: never, PollFastFor: -1}
	keys := signalAll(t, counted, copts, 1, 5)
	keys = append(keys, signalAll(t, counted, copts, 4, 10)...)
	f.checkOnce(t, store, keys, 45)
	if c := counted.Counts(); c.Heads != 0 {
		t.Errorf("%d HEADs: a notified writer should not read the doorbell", c.Heads)
	}
}

// TestDoorbellDeliversCommands: on a store without notification, a
// writer that reads the doorbell applies the commands of clients that
// ring it, without waiting for its next LIST; none is lost and none
// applied twice.
func TestDoorbellDeliversCommands(t *testing.T) {
	store := mem.New()
	f := startWakeFixture(t, store, InboxOptions{BellEvery: time.Millisecond})
	copts := ClientOptions{PollMin: time.Millisecond, PollMax: time.Millisecond, RingBell: true}
	keys := signalAll(t, store, copts, 1, 5)
	keys = append(keys, signalAll(t, store, copts, 4, 10)...)
	f.checkOnce(t, store, keys, 45)
}

// TestSpuriousWakesHarmless: wake-ups with nothing new (doorbell rings
// without a command, objects that are not commands appearing in the
// inbox folder, notifications by the thousand) only cost passes: each
// command is still applied and answered exactly once, and the foreign
// objects are left in place.
func TestSpuriousWakesHarmless(t *testing.T) {
	dir := t.TempDir()
	store, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			f := startWakeFixture(t, store, InboxOptions{BellEvery: time.Millisecond, NoNotify: !notify})
			ctx, cancel := context.WithCancel(context.Background())
			var noise sync.WaitGroup
			var foreign atomic.Int64
			noise.Add(1)
			go func() {
				defer noise.Done()
				for i := 0; ctx.Err() == nil; i++ {
					_ = ring(ctx, store, "inbox", fmt.Sprintf("noise-%d", i))
					// Named like a command, but not one.
					key := "inbox/" + ulid.Make().String()
					if _, err := store.Put(ctx, key, []byte("not a command"), objstore.PutOptions{}); err == nil {
						foreign.Add(1)
					}
				}
			}()
			copts := ClientOptions{PollMin: time.Millisecond, PollMax: time.Millisecond, RingBell: !notify, NoNotify: !notify}
			keys := signalAll(t, store, copts, 3, 5)
			cancel()
			noise.Wait()
			for _, k := range keys {
				if b := f.w.kv(sigBufKey(k)); !bufferHolds(b, "p-"+k) {
					t.Errorf("buffer of %s = %q, want its payload", k, b)
				}
			}
			f.stop()
			f.counts.mu.Lock()
			n := len(f.counts.answers)
			for id, times := range f.counts.answers {
				if times != 1 {
					t.Errorf("command %s answered %d times, want once", id, times)
				}
			}
			f.counts.mu.Unlock()
			if n != len(keys) || len(keys) != 15 {
				t.Fatalf("%d answers for %d commands, want 15 each", n, len(keys))
			}
			if foreign.Load() == 0 || len(ibxKeys(t, store, "inbox/")) == 0 {
				t.Fatalf("no foreign object stayed in the inbox (%d written): the noise did not run or the writer deleted it", foreign.Load())
			}
			for _, k := range ibxKeys(t, store, "inbox/") {
				if err := store.Delete(context.Background(), k); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFolderWatchSurvivesRemoval: the watch fires for an object created
// in the folder, again after the file store removed the emptied folder
// and a new object created it again.
func TestFolderWatchSurvivesRemoval(t *testing.T) {
	store, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	fw, err := watchFolder(counting.New(store), "inbox", func(name string) bool { return strings.HasPrefix(name, "cmd") }, ibxLogger())
	if err != nil || fw == nil {
		t.Fatalf("watchFolder = %v, %v; want a watch on a file store", fw, err)
	}
	defer fw.Close()
	ctx := context.Background()
	await := func(what string) {
		t.Helper()
		select {
		case <-fw.C():
		case <-time.After(time.Minute):
			t.Fatalf("no wake-up within a minute after %s", what)
		}
	}
	for i := range 3 {
		key := fmt.Sprintf("inbox/cmd%d", i)
		if _, err := store.Put(ctx, key, []byte("x"), objstore.CreateOnly()); err != nil {
			t.Fatal(err)
		}
		await("creating " + key)
		if err := store.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Head(ctx, key); err == nil {
			t.Fatal("deleted object still there")
		}
	}
	if fw, err := watchFolder(mem.New(), "inbox", func(string) bool { return true }, ibxLogger()); fw != nil || err != nil {
		t.Fatalf("watchFolder on a mem store = %v, %v; want none", fw, err)
	}
}
