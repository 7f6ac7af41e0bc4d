package queue

import (
	"testing"
)

// A compare-delete removes a key only while it holds the expected value,
// and a failed compare skips that delete alone, not the settlement.
func TestSettlementCompareDeletes(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	for k, v := range map[string]string{"same": "v1", "changed": "v2"} {
		if err := f.q.KVPut(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	f.enqueue("q", "a", EnqueueOptions{})
	c := f.claim("q")
	eff := &SettlementEffects{
		KVPuts: []KVWrite{{"written", []byte("x")}},
		KVCompareDeletes: []KVWrite{
			{"same", []byte("v1")},    // still v1: deleted
			{"changed", []byte("v1")}, // now v2: kept
			{"absent", []byte("v1")},  // missing: nothing to do
		},
		Enqueue: []NewJob{{Queue: "next", Payload: []byte("n")}},
	}
	if err := f.q.Ack(ctx, c, eff); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.kvGet("same"); ok {
		t.Error("same: not deleted although it held the expected value")
	}
	if v, ok := f.kvGet("changed"); !ok || v != "v2" {
		t.Errorf("changed = %q, %v; want v2 kept", v, ok)
	}
	if _, ok := f.kvGet("written"); !ok {
		t.Error("the settlement's put did not apply")
	}
	if s := f.stats("next"); s.Pending != 1 {
		t.Errorf("the settlement's enqueue did not apply: %+v", s)
	}
	if err := f.q.Ack(ctx, f.claim("next"), &SettlementEffects{KVCompareDeletes: []KVWrite{{"k", nil}}}); err == nil {
		t.Error("a compare-delete without a value was accepted")
	}
}

// ApplyEffects applies everything only when its guard holds, so a repeat
// with a self-falsifying guard is a no-op.
func TestApplyEffectsGuarded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	if err := f.q.KVPut(ctx, "active", []byte("r1")); err != nil {
		t.Fatal(err)
	}
	eff := &SettlementEffects{
		Enqueue:          []NewJob{{Queue: "notify", Payload: []byte("done")}},
		KVPuts:           []KVWrite{{"result", []byte("failed")}},
		KVDeletes:        []string{"active"},
		KVCompareDeletes: []KVWrite{{"missing", []byte("x")}},
	}
	guard := []KVWrite{{"active", []byte("r1")}, {"result", nil}}
	for i, want := range []bool{true, false} {
		ok, err := f.q.ApplyEffects(ctx, eff, guard)
		if err != nil || ok != want {
			t.Fatalf("ApplyEffects #%d = %v, %v; want %v", i+1, ok, err, want)
		}
	}
	if _, ok := f.kvGet("active"); ok {
		t.Error("active not deleted")
	}
	if v, ok := f.kvGet("result"); !ok || v != "failed" {
		t.Errorf("result = %q, %v", v, ok)
	}
	if s := f.stats("notify"); s.Pending != 1 {
		t.Errorf("notify queue %+v; want exactly one job", s)
	}
	if ok, err := f.q.ApplyEffects(ctx, &SettlementEffects{}, nil); ok || err == nil {
		t.Errorf("empty effects: %v, %v; want an error", ok, err)
	}
}
