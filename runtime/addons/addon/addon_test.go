package addon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

func valid() Options {
	return Options{QueueName: "q", KVPrefix: "p/", MaxAttempts: 1, Concurrency: 1, SubmitConcurrency: 1}
}

func TestApplyInOrder(t *testing.T) {
	l := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := valid()
	o.Apply([]Option{WithQueueName("a"), WithQueueName("b"), WithKVPrefix("k/"), WithMaxAttempts(4), WithConcurrency(5),
		WithSubmitConcurrency(6), WithLogger(l), WithRuntimeOptions(runtime.Options{ShutdownTimeout: -1}), WithRuntimeOptions(runtime.Options{ShutdownTimeout: 1})})
	if o.QueueName != "b" || o.KVPrefix != "k/" || o.MaxAttempts != 4 || o.Concurrency != 5 || o.SubmitConcurrency != 6 ||
		o.Logger != l || o.RuntimeOptions.ShutdownTimeout != 1 {
		t.Fatalf("options %+v", o)
	}
}

func TestCheckNamesTheOption(t *testing.T) {
	if o := valid(); o.Check() != nil {
		t.Fatalf("valid options: %v", o.Check())
	}
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithMaxAttempts(0), "WithMaxAttempts(0)"},
		{WithConcurrency(-1), "WithConcurrency(-1)"},
		{WithSubmitConcurrency(0), "WithSubmitConcurrency(0)"},
		{WithKVPrefix(""), `WithKVPrefix("")`},
		{WithKVPrefix(runtime.ReservedKVPrefix + "x/"), `WithKVPrefix("` + runtime.ReservedKVPrefix + `x/")`},
	} {
		o := valid()
		o.Apply([]Option{tc.opt})
		if err := o.Check(); err == nil || !strings.HasPrefix(err.Error(), tc.want+": want") {
			t.Errorf("Check after %s = %v; want an error naming it", tc.want, err)
		}
	}
}

// The runner's settings win over the same ones in RuntimeOptions.
func TestNewRuntimeOwnSettingsWin(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	q, err := queue.Open(ctx, store, queue.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	o := valid()
	o.Apply([]Option{WithQueueName("mine"), WithRuntimeOptions(runtime.Options{QueueName: "theirs"})})
	runner := runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) { return runtime.Succeed(nil), nil })
	rt, err := o.NewRuntime(q, store, runner, runtime.TerminalHookFunc(func(context.Context, *runstate.Outcome, *runtime.TerminalEffects) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if rt.QueueName() != "mine" {
		t.Fatalf("runtime queue %q, want the runner's own %q", rt.QueueName(), "mine")
	}
}

func TestLogDefaultsAndTags(t *testing.T) {
	var buf strings.Builder
	o := valid()
	o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	o.Log("jobs").Info("hi")
	if !strings.Contains(buf.String(), "component=jobs") {
		t.Fatalf("log line %q lacks the component", buf.String())
	}
	o.Logger = nil
	if o.Log("bulk") == nil {
		t.Fatal("nil logger without Options.Logger")
	}
}
