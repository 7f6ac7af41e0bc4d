package faults_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

var ctx = context.Background()

func TestNoRulesPassesThrough(t *testing.T) {
	inner := mem.New()
	s := faults.New(inner, 1)
	if _, err := s.Put(ctx, "a", []byte("x"), objstore.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a", []byte("y"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("inner precondition error not passed through: %v", err)
	}
	b, _, err := s.Get(ctx, "a")
	if err != nil || string(b) != "x" {
		t.Fatalf("Get = %q, %v", b, err)
	}
}

func TestErrNotPerformed(t *testing.T) {
	inner := mem.New()
	s := faults.New(inner, 1)
	myErr := errors.New("boom")
	s.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: myErr})
	if _, err := s.Put(ctx, "a", []byte("x"), objstore.PutOptions{}); !errors.Is(err, myErr) {
		t.Fatalf("Put err = %v, want boom", err)
	}
	if inner.Len() != 0 {
		t.Fatal("failed call was performed")
	}
	// Other ops are not affected.
	if _, err := s.Head(ctx, "a"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Head err = %v", err)
	}
	s.Set(faults.Rule{Rate: 1})
	for _, err := range []error{
		func() error { _, _, err := s.Get(ctx, "a"); return err }(),
		func() error { _, err := s.Head(ctx, "a"); return err }(),
		s.Delete(ctx, "a"),
		func() error { _, err := s.List(ctx, "", "", 0); return err }(),
	} {
		if !errors.Is(err, faults.ErrInjected) {
			t.Fatalf("err = %v, want ErrInjected", err)
		}
	}
	s.Clear()
	if _, err := s.Put(ctx, "a", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestKeyPrefix(t *testing.T) {
	s := faults.New(mem.New(), 1)
	s.Set(faults.Rule{KeyPrefix: "wal/", Rate: 1})
	if _, err := s.Put(ctx, "wal/1", nil, objstore.PutOptions{}); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("wal/1: %v", err)
	}
	if _, err := s.Put(ctx, "manifest", nil, objstore.PutOptions{}); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if _, err := s.List(ctx, "wal/", "", 0); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("list wal/: %v", err)
	}
	if _, err := s.List(ctx, "", "", 0); err != nil {
		t.Fatalf("list all: %v", err)
	}
}

func TestNthOnce(t *testing.T) {
	s := faults.New(mem.New(), 1)
	s.Set(faults.Rule{Ops: faults.OpPut, Nth: 3})
	var failed []int
	for i := 1; i <= 6; i++ {
		if _, err := s.Put(ctx, "k", nil, objstore.PutOptions{}); err != nil {
			failed = append(failed, i)
		}
	}
	if len(failed) != 1 || failed[0] != 3 {
		t.Fatalf("failed calls %v, want [3]", failed)
	}
	s.Set(faults.Rule{Ops: faults.OpPut, Nth: 1})
	if _, err := s.Put(ctx, "k", nil, objstore.PutOptions{}); err == nil {
		t.Fatal("Set did not restart the Nth count")
	}
}

func TestZeroRuleNeverFires(t *testing.T) {
	s := faults.New(mem.New(), 1)
	s.Set(faults.Rule{Ops: faults.OpPut})
	for range 100 {
		if _, err := s.Put(ctx, "k", nil, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func pattern(seed int64, rate float64, n int) []bool {
	s := faults.New(mem.New(), seed)
	s.Set(faults.Rule{Rate: rate})
	out := make([]bool, n)
	for i := range out {
		_, err := s.Head(ctx, "k")
		out[i] = errors.Is(err, faults.ErrInjected)
	}
	return out
}

func TestRateDeterministic(t *testing.T) {
	a, b, c := pattern(7, 0.3, 2000), pattern(7, 0.3, 2000), pattern(8, 0.3, 2000)
	hits, same := 0, true
	differ := false
	for i := range a {
		if a[i] {
			hits++
		}
		same = same && a[i] == b[i]
		differ = differ || a[i] != c[i]
	}
	if !same {
		t.Fatal("same seed gave different fault patterns")
	}
	if !differ {
		t.Fatal("different seeds gave the same fault pattern")
	}
	if hits < 450 || hits > 750 {
		t.Fatalf("rate 0.3 fired %d of 2000 times", hits)
	}
}

func TestLoseResponsePerforms(t *testing.T) {
	inner := mem.New()
	s := faults.New(inner, 1)
	s.Set(faults.Rule{Ops: faults.OpPut | faults.OpDelete, Rate: 1, LoseResponse: true})
	if _, err := s.Put(ctx, "a", []byte("x"), objstore.PutOptions{}); !errors.Is(err, faults.ErrLostResponse) {
		t.Fatalf("Put err = %v", err)
	}
	if b, _, err := inner.Get(ctx, "a"); err != nil || string(b) != "x" {
		t.Fatalf("lost-response Put not performed: %q %v", b, err)
	}
	if err := s.Delete(ctx, "a"); !errors.Is(err, faults.ErrLostResponse) {
		t.Fatalf("Delete err = %v", err)
	}
	if inner.Len() != 0 {
		t.Fatal("lost-response Delete not performed")
	}
}

func TestTornWrite(t *testing.T) {
	inner := mem.New()
	s := faults.New(inner, 3)
	s.Set(faults.Rule{Rate: 1, TornWrite: true})
	data := []byte("0123456789abcdef")
	if _, err := s.Put(ctx, "a", data, objstore.CreateOnly()); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("Put err = %v", err)
	}
	b, _, err := inner.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= len(data) || string(b) != string(data[:len(b)]) {
		t.Fatalf("stored %q, want a strict prefix of %q", b, data)
	}
	// A TornWrite rule does not touch other methods.
	if _, _, err := s.Get(ctx, "a"); err != nil {
		t.Fatalf("Get affected by TornWrite rule: %v", err)
	}
}

func TestLatencyThenCall(t *testing.T) {
	inner := mem.New()
	s := faults.New(inner, 1)
	s.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Latency: 20 * time.Millisecond})
	start := time.Now()
	if _, err := s.Put(ctx, "a", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("Put returned after %v, before the injected latency", d)
	}
	if inner.Len() != 1 {
		t.Fatal("latency-only rule did not perform the call")
	}
	s.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Latency: time.Hour})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, "b", nil, objstore.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with cancelled ctx during latency: %v", err)
	}
}

func TestHang(t *testing.T) {
	inner := mem.New()
	s := faults.New(inner, 1)
	s.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Hang: true})
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Put(cctx, "a", []byte("x"), objstore.PutOptions{})
		errc <- err
	}()
	select {
	case err := <-errc:
		t.Fatalf("hung Put returned before cancel: %v", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung Put err = %v", err)
	}
	if inner.Len() != 0 {
		t.Fatal("hung Put was performed")
	}
}

func TestFirstMatchingRuleWins(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	s := faults.New(mem.New(), 1)
	s.Set(faults.Rule{Ops: faults.OpGet, Rate: 1, Err: e1}, faults.Rule{Rate: 1, Err: e2})
	if _, _, err := s.Get(ctx, "a"); !errors.Is(err, e1) {
		t.Fatalf("Get err = %v", err)
	}
	if _, err := s.Head(ctx, "a"); !errors.Is(err, e2) {
		t.Fatalf("Head err = %v", err)
	}
}

func TestConcurrentNth(t *testing.T) {
	s := faults.New(mem.New(), 1)
	s.Set(faults.Rule{Ops: faults.OpPut, Nth: 100}, faults.Rule{Ops: faults.OpGet, Rate: 0.5})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				_, err := s.Put(ctx, "k", []byte{byte(w), byte(i)}, objstore.PutOptions{})
				_, _, _ = s.Get(ctx, "k")
				if err != nil {
					mu.Lock()
					failures++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if failures != 1 {
		t.Fatalf("Nth rule fired %d times under concurrency, want 1", failures)
	}
}

func TestOpString(t *testing.T) {
	if got := (faults.OpGet | faults.OpList).String(); got != "get|list" {
		t.Fatalf("String = %q", got)
	}
}
