package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func kvValue(t *testing.T, q *Queue, key string) (string, bool) {
	t.Helper()
	v, err := q.KVGet(context.Background(), key)
	if errors.Is(err, ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("KVGet(%q): %v", key, err)
	}
	return string(v), true
}

func TestKVApplyAtomicWithConditions(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if err := f.q.KVPut(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := f.q.KVPut(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}

	// A failing condition writes nothing, even with several conditions.
	ok, err := f.q.KVApply(ctx, KVBatch{
		Expect: []KVWrite{{Key: "a", Value: []byte("1")}, {Key: "marker", Value: []byte("present")}},
		Puts:   []KVWrite{{Key: "b", Value: []byte("2")}}, Deletes: []string{"gone"},
	})
	if err != nil || ok {
		t.Fatalf("KVApply with a false condition = %v, %v; want false, nil", ok, err)
	}
	if _, found := kvValue(t, f.q, "b"); found {
		t.Fatal("b written although a condition failed")
	}
	if _, found := kvValue(t, f.q, "gone"); !found {
		t.Fatal("gone deleted although a condition failed")
	}

	// All conditions hold (an absent key expected with nil): all writes land.
	ok, err = f.q.KVApply(ctx, KVBatch{
		Expect: []KVWrite{{Key: "a", Value: []byte("1")}, {Key: "marker"}},
		Puts:   []KVWrite{{Key: "b", Value: []byte("2")}, {Key: "marker", Value: []byte("m")}},
		// Deletes apply after puts: a key both put and deleted ends absent.
		Deletes: []string{"gone", "b", "never-existed"},
	})
	if err != nil || !ok {
		t.Fatalf("KVApply = %v, %v; want true, nil", ok, err)
	}
	if v, found := kvValue(t, f.q, "marker"); !found || v != "m" {
		t.Fatalf("marker = %q, %v; want m", v, found)
	}
	for _, k := range []string{"b", "gone"} {
		if _, found := kvValue(t, f.q, k); found {
			t.Fatalf("%s still present after the batch deleted it", k)
		}
	}

	// The marker now exists, so the same guarded batch is refused.
	ok, err = f.q.KVApply(ctx, KVBatch{Expect: []KVWrite{{Key: "marker"}}, Puts: []KVWrite{{Key: "marker", Value: []byte("again")}}})
	if err != nil || ok {
		t.Fatalf("second guarded KVApply = %v, %v; want false, nil", ok, err)
	}
	if v, _ := kvValue(t, f.q, "marker"); v != "m" {
		t.Fatalf("marker = %q after a refused batch, want m", v)
	}
}

func TestKVApplyDurability(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	if _, err := f.q.KVApply(ctx, KVBatch{Puts: []KVWrite{{Key: "durable", Value: []byte("d")}}}); err != nil {
		t.Fatal(err)
	}
	f.crash()
	if v, found := kvValue(t, f.q, "durable"); !found || v != "d" {
		t.Fatalf("durable batch lost by a crash: %q, %v", v, found)
	}

	// A non-durable batch is visible at once.
	if _, err := f.q.KVApply(ctx, KVBatch{Puts: []KVWrite{{Key: "soft", Value: []byte("s")}}, NonDurable: true}); err != nil {
		t.Fatal(err)
	}
	if _, found := kvValue(t, f.q, "soft"); !found {
		t.Fatal("non-durable batch not visible to the writer")
	}

	// A later durable commit carries the earlier non-durable batch.
	if _, err := f.q.KVApply(ctx, KVBatch{Puts: []KVWrite{{Key: "soft", Value: []byte("s")}}, Deletes: []string{"durable"}, NonDurable: true}); err != nil {
		t.Fatal(err)
	}
	if err := f.q.KVPut(ctx, "later", []byte("l")); err != nil {
		t.Fatal(err)
	}
	f.crash()
	if v, found := kvValue(t, f.q, "soft"); !found || v != "s" {
		t.Fatalf("non-durable batch followed by a durable commit lost: %q, %v", v, found)
	}
	if _, found := kvValue(t, f.q, "durable"); found {
		t.Fatal("the non-durable batch's delete was lost")
	}
}

func TestKVApplyValidation(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	cases := []struct {
		name string
		b    KVBatch
		want string
	}{
		{"empty", KVBatch{Expect: []KVWrite{{Key: "a"}}}, "no puts and no deletes"},
		{"empty expect key", KVBatch{Expect: []KVWrite{{Key: ""}}, Puts: []KVWrite{{Key: "a"}}}, "KVApply expect"},
		{"empty put key", KVBatch{Puts: []KVWrite{{Key: ""}}}, "KVApply put"},
		{"empty delete key", KVBatch{Deletes: []string{""}}, "KVApply delete"},
		{"long key", KVBatch{Deletes: []string{strings.Repeat("k", MaxKVKeySize+1)}}, "KVApply delete"},
	}
	for _, c := range cases {
		_, err := f.q.KVApply(ctx, c.b)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v; want ErrInvalid mentioning %q", c.name, err, c.want)
		}
	}
	big := make([]byte, MaxKVValueSize+1)
	if _, err := f.q.KVApply(ctx, KVBatch{Puts: []KVWrite{{Key: "big", Value: big}}}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized value: err = %v; want ErrTooLarge", err)
	}
	if err := f.q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.KVApply(ctx, KVBatch{Puts: []KVWrite{{Key: "a"}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("KVApply on a closed queue: err = %v; want ErrClosed", err)
	}
}

func TestWakeScheduledKV(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	id := f.enqueue("q", "p", EnqueueOptions{RunAt: t0.Add(time.Hour)})
	if err := f.q.KVPut(ctx, "buf", []byte("signal")); err != nil {
		t.Fatal(err)
	}
	consume := KVBatch{
		Expect:  []KVWrite{{Key: "buf", Value: []byte("signal")}},
		Deletes: []string{"buf"},
		Puts:    []KVWrite{{Key: "marker", Value: []byte("delivered")}},
	}

	// A failing condition leaves the job scheduled and writes nothing.
	wrong := consume
	wrong.Expect = []KVWrite{{Key: "buf", Value: []byte("other")}}
	res, err := f.q.WakeScheduledKV(ctx, id, []byte("w"), wrong)
	if err != nil || res != WakeConditionFailed {
		t.Fatalf("WakeScheduledKV with a false condition = %q, %v; want %q", res, err, WakeConditionFailed)
	}
	if j := f.job(id); j.State != StateScheduled || !j.WokenAt.IsZero() {
		t.Fatalf("job after a failed condition: state %s, woken %v", j.State, j.WokenAt)
	}
	if _, found := f.kvGet("marker"); found {
		t.Fatal("marker written although the condition failed")
	}

	// Conditions hold: the wake and the batch commit together, durably.
	res, err = f.q.WakeScheduledKV(ctx, id, []byte("w"), consume)
	if err != nil || res != Woken {
		t.Fatalf("WakeScheduledKV = %q, %v; want woken", res, err)
	}
	f.crash()
	j := f.job(id)
	if j.State != StatePending || string(j.WakePayload) != "w" || j.WokenAt.IsZero() {
		t.Fatalf("woken job after a crash: state %s, payload %q, woken %v", j.State, j.WakePayload, j.WokenAt)
	}
	if v, found := f.kvGet("marker"); !found || v != "delivered" {
		t.Fatalf("marker after a crash = %q, %v", v, found)
	}
	if _, found := f.kvGet("buf"); found {
		t.Fatal("buf not consumed with the wake")
	}

	// A job no longer scheduled is not woken and the batch is not applied.
	if err := f.q.KVPut(ctx, "buf", []byte("signal")); err != nil {
		t.Fatal(err)
	}
	res, err = f.q.WakeScheduledKV(ctx, id, []byte("again"), consume)
	if err != nil || res != NotScheduled {
		t.Fatalf("second wake = %q, %v; want not_scheduled", res, err)
	}
	if _, found := f.kvGet("buf"); !found {
		t.Fatal("batch applied although the job was not scheduled")
	}
	res, err = f.q.WakeScheduledKV(ctx, "no-such-job", nil, KVBatch{})
	if err != nil || res != NotFound {
		t.Fatalf("wake of a missing job = %q, %v; want not_found", res, err)
	}
	if _, err := f.q.WakeScheduledKV(ctx, id, nil, KVBatch{Expect: []KVWrite{{Key: ""}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty condition key: err = %v; want ErrInvalid", err)
	}
	if _, err := f.q.WakeScheduledKV(ctx, id, make([]byte, MaxKVValueSize+1), KVBatch{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized payload: err = %v; want ErrTooLarge", err)
	}
}
