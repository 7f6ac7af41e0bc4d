package runtime

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

func TestControlKVPrefix(t *testing.T) {
	if p, err := ControlKVPrefix("inbox"); err != nil || p != "workflow/inbox/" {
		t.Fatalf(`ControlKVPrefix("inbox") = %q, %v; want "workflow/inbox/"`, p, err)
	}
	// Every caller-KV prefix constant of keys.go is the runtime's own.
	f, err := parser.ParseFile(token.NewFileSet(), "keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	own := 0
	ast.Inspect(f, func(n ast.Node) bool {
		bin, ok := n.(*ast.BinaryExpr)
		if !ok {
			return true
		}
		if id, ok := bin.X.(*ast.Ident); !ok || id.Name != "ReservedKVPrefix" {
			return true
		}
		lit, ok := bin.Y.(*ast.BasicLit)
		if !ok {
			return true
		}
		seg, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		seg, _, _ = strings.Cut(seg, "/")
		own++
		if _, err := ControlKVPrefix(seg); !errors.Is(err, ErrReserved) {
			t.Errorf("ControlKVPrefix(%q) = %v; want ErrReserved: the runtime's own records live there", seg, err)
		}
		return true
	})
	if own < 10 {
		t.Fatalf("found %d prefix constants in keys.go; the check reads nothing", own)
	}
	for _, name := range []string{"", "Inbox", "a/b", "in box", "a-very-long-name-of-more-than-32-chars"} {
		if _, err := ControlKVPrefix(name); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ControlKVPrefix(%q) = %v; want ErrInvalidKey", name, err)
		}
	}
}

// The control operations write a record only under a control namespace,
// and never where the runtime keeps its own records.
func TestControlRecordsStayInTheirNamespace(t *testing.T) {
	e := newEnv(t, newWaiter(false))
	value := e.rt.SignalValue([]byte("p"))
	for _, key := range []string{"workflow/signals/buf/k", "workflow/runs/r", "workflow/inbox/", "app/x", "workflow/inbox"} {
		rec := queue.KVWrite{Key: key, Value: []byte("m")}
		if err := e.rt.BufferSignal(e.ctx, "k", value, rec); !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrReserved) {
			t.Errorf("BufferSignal with record %q = %v; want it refused", key, err)
		}
		if _, err := e.rt.DeliverSignal(e.ctx, "k", value, rec); !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrReserved) {
			t.Errorf("DeliverSignal with record %q = %v; want it refused", key, err)
		}
		if _, err := e.rt.ClearSignalWith(e.ctx, "k", rec); !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrReserved) {
			t.Errorf("ClearSignalWith with record %q = %v; want it refused", key, err)
		}
	}
	assertNoSignalResidue(t, e)
	if err := e.rt.BufferSignal(e.ctx, "k", []byte{9}, queue.KVWrite{Key: "workflow/inbox/x"}); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("BufferSignal with a value SignalValue did not make = %v; want ErrCorruptRecord", err)
	}
}

// BufferSignal and ClearSignalWith commit their record with their own
// writes, once: a second attempt under the same record writes nothing.
func TestControlSignalRecordsCommitOnce(t *testing.T) {
	e := newEnv(t, newWaiter(false))
	rec := func(v string) queue.KVWrite { return queue.KVWrite{Key: "workflow/test/cmd-1", Value: []byte(v)} }
	first := e.rt.SignalValue([]byte("one"))
	if err := e.rt.BufferSignal(e.ctx, "k", first, rec("m1")); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if err := e.rt.BufferSignal(e.ctx, "k", e.rt.SignalValue([]byte("two")), rec("m2")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second BufferSignal under the same record = %v; want ErrRecordExists", err)
	}
	if cur, err := e.rt.SignalBuffered(e.ctx, "k"); err != nil || !bytes.Equal(cur, first) {
		t.Fatalf("buffer after the refused second attempt = %q, %v; want the first signal", cur, err)
	}
	if m, err := e.q.KVGet(e.ctx, "workflow/test/cmd-1"); err != nil || string(m) != "m1" {
		t.Fatalf("record = %q, %v; want the first attempt's", m, err)
	}
	// With more records, any one taken refuses the whole commit.
	other := queue.KVWrite{Key: "workflow/test/cmd-2", Value: []byte("m3")}
	if err := e.rt.BufferSignal(e.ctx, "k", e.rt.SignalValue([]byte("three")), other, rec("m3")); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("BufferSignal with one of two records taken = %v; want ErrRecordExists", err)
	}
	if _, err := e.q.KVGet(e.ctx, other.Key); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the refused commit wrote its free record: %v", err)
	}
	if got, want := e.rt.SignalExpiry(first), e.clock.Now().Add(-time.Second).Add(signal.DefaultRetention).Truncate(time.Millisecond); !got.Equal(want) {
		t.Fatalf("SignalExpiry = %v, want %v", got, want)
	}
	// No waiter: DeliverSignal leaves the signal buffered, writes nothing.
	if out, err := e.rt.DeliverSignal(e.ctx, "k", first, rec("delivered")); err != nil || out != signal.Buffered {
		t.Fatalf("DeliverSignal without a waiter = %v, %v; want buffered", out, err)
	}
	if m, _ := e.q.KVGet(e.ctx, "workflow/test/cmd-1"); string(m) != "m1" {
		t.Fatalf("record after a delivery that found no waiter = %q; want it untouched", m)
	}

	clear := queue.KVWrite{Key: "workflow/test/cmd-2", Value: []byte("c")}
	if ok, err := e.rt.ClearSignalWith(e.ctx, "k", clear); err != nil || !ok {
		t.Fatalf("ClearSignalWith = %v, %v; want the signal cleared", ok, err)
	}
	if cur, _ := e.rt.SignalBuffered(e.ctx, "k"); cur != nil {
		t.Fatalf("buffer after the clear = %q", cur)
	}
	if err := e.rt.BufferSignal(e.ctx, "k", e.rt.SignalValue([]byte("three")), queue.KVWrite{Key: "workflow/test/cmd-3", Value: []byte("m3")}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.rt.ClearSignalWith(e.ctx, "k", clear); ok || !errors.Is(err, ErrRecordExists) {
		t.Fatalf("second ClearSignalWith under the same record = %v, %v; want ErrRecordExists", ok, err)
	}
	if cur, _ := e.rt.SignalBuffered(e.ctx, "k"); !bufferHolds(cur, "three") {
		t.Fatalf("buffer after the refused second clear = %q; want the newer signal kept", cur)
	}
	if ok, err := e.rt.ClearSignalWith(e.ctx, "none", queue.KVWrite{Key: "workflow/test/cmd-4", Value: []byte("c")}); ok || err != nil {
		t.Fatalf("ClearSignalWith with nothing buffered = %v, %v; want false", ok, err)
	}
	if _, err := e.q.KVGet(e.ctx, "workflow/test/cmd-4"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("a clear that found nothing wrote its record: %v", err)
	}
}

// DeliverSignal wakes the registered waiter with the buffered signal and
// commits the record with the wake.
func TestControlDeliverSignal(t *testing.T) {
	w := newWaiter(false)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "d"})
	e.waitRun("d", inState(runstate.StateWaiting))
	e.stop()
	value := e.rt.SignalValue([]byte("go"))
	if err := e.rt.BufferSignal(e.ctx, "k:d", value, queue.KVWrite{Key: "workflow/test/cmd", Value: []byte("buffered")}); err != nil {
		t.Fatal(err)
	}
	out, err := e.rt.DeliverSignal(e.ctx, "k:d", value, queue.KVWrite{Key: "workflow/test/cmd", Value: []byte("delivered")})
	if err != nil || out != signal.Delivered {
		t.Fatalf("DeliverSignal = %v, %v; want delivered", out, err)
	}
	if m, _ := e.q.KVGet(e.ctx, "workflow/test/cmd"); string(m) != "delivered" {
		t.Fatalf("record after the wake = %q; want the outcome", m)
	}
	// The signal is consumed, and no waiter is left to wake again.
	if cur, err := e.rt.SignalBuffered(e.ctx, "k:d"); cur != nil || err != nil {
		t.Fatalf("buffer after the wake = %q, %v; want it consumed", cur, err)
	}
	if _, err := e.rt.DeliverSignal(e.ctx, "k:d", value, queue.KVWrite{Key: "workflow/test/cmd", Value: []byte("again")}); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.q.KVGet(e.ctx, "workflow/test/cmd"); string(m) != "delivered" {
		t.Fatalf("record after the second delivery = %q; want it untouched", m)
	}
	e.start()
	if o := e.outcome(); o.Status != runstate.Succeeded || string(o.Result) != "sig:go" {
		t.Fatalf("outcome %+v; want the signal delivered once", o)
	}
}

func TestIncarnation(t *testing.T) {
	e := newEnv(t, newWaiter(false))
	if inc, err := e.rt.Incarnation(e.ctx, "r"); err != nil || inc != (Incarnation{}) {
		t.Fatalf("Incarnation of an unknown run = %+v, %v", inc, err)
	}
	if _, err := e.rt.Incarnation(e.ctx, "bad id"); !errors.Is(err, runstate.ErrInvalidRunID) {
		t.Fatalf("Incarnation of an invalid id: %v", err)
	}
	e.submit(RunSpec{RunID: "r"})
	first, err := e.rt.Incarnation(e.ctx, "r")
	if err != nil || first.Active == "" || first.Ended != "" {
		t.Fatalf("Incarnation of an active run = %+v, %v", first, err)
	}
	if ok, err := e.rt.Cancel(e.ctx, "r"); err != nil || !ok {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	e.submit(RunSpec{RunID: "r"})
	second, err := e.rt.Incarnation(e.ctx, "r")
	if err != nil || second.Active == "" || second.Active == first.Active || second.Ended != first.Active || second.Status != runstate.Cancelled {
		t.Fatalf("Incarnation after a cancel and a resubmission = %+v, %v; want a new active run and the first ended cancelled (%s)", second, err, first.Active)
	}
}

// RunSpec.Validate refuses what Submit refuses, with the same errors.
func TestRunSpecValidate(t *testing.T) {
	e := newEnv(t, newWaiter(false))
	for _, spec := range []RunSpec{
		{RunID: "bad id"},
		{RunID: "r", Headers: map[string]string{"workflow.x": "1"}},
		{KVWrites: map[string][]byte{"workflow/x": nil}},
		{RunID: "r", KVWrites: map[string][]byte{"": nil}},
		{RunID: "r", KVWrites: map[string][]byte{"big": make([]byte, queue.MaxKVValueSize+1)}},
	} {
		verr := spec.Validate()
		if spec.RunID == "" {
			spec.RunID = "fresh"
		}
		_, serr := e.rt.Submit(e.ctx, spec)
		if verr == nil || serr == nil || (spec.RunID != "fresh" && verr.Error() != serr.Error()) {
			t.Errorf("spec %+v: Validate = %v, Submit = %v; want the same refusal", spec.RunID, verr, serr)
		}
	}
	if err := (RunSpec{Headers: map[string]string{"who": "me"}, KVWrites: map[string][]byte{"app/x": []byte("1")}}).Validate(); err != nil {
		t.Fatalf("a valid spec: %v", err)
	}
}

// TestControlDeliverSignalAfterTheRecheckWon: a control plane buffers a
// signal while a step that has just registered runs its recheck
// (afterRegister), which wakes the step with that signal first. The
// control plane's DeliverSignal then finds no waiter and an empty
// buffer: the signal was delivered, and it says so (the server's hook
// answered "buffered" here, under load in CI).
func TestControlDeliverSignalAfterTheRecheckWon(t *testing.T) {
	w := newWaiter(false)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "dr"})
	st := e.waitRun("dr", inState(runstate.StateWaiting))
	e.stop()
	value := e.rt.SignalValue([]byte("go"))
	if err := e.rt.BufferSignal(e.ctx, "k:dr", value, queue.KVWrite{Key: "workflow/test/cmd", Value: []byte("buffered")}); err != nil {
		t.Fatal(err)
	}
	e.rt.afterRegister(e.ctx, "k:dr", st.JobID)
	out, err := e.rt.DeliverSignal(e.ctx, "k:dr", value, queue.KVWrite{Key: "workflow/test/cmd", Value: []byte("delivered")})
	if err != nil || out != signal.Delivered {
		t.Fatalf("DeliverSignal after the recheck woke the step = %v, %v; want delivered", out, err)
	}
	assertNoSignalResidue(t, e)
	e.start()
	if o := e.outcome(); o.Status != runstate.Succeeded || string(o.Result) != "sig:go" {
		t.Fatalf("outcome %+v; want the signal delivered once", o)
	}
}
