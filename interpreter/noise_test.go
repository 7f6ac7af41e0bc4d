package interpreter

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A cancelled run's step is not retried, so nothing says it is: its
// interrupted action logs no "step failed; the runtime retries it".
func TestCancelledStepLogsNoRetry(t *testing.T) {
	var logs syncBuffer
	started := make(chan struct{})
	block := funcAction{name: "block", fn: func(ctx context.Context, _ *actions.Call) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}
	e := newTestEnv(t, withActions(block), withLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	p := e.write("block.yaml", `
tqw: v1
name: block
steps:
  - id: wait
    action: block
  - id: done
    succeed: ok
`)
	ch := e.submit(p, map[string]any{}, "n1")
	e.start()
	<-started
	if ok, err := e.rt.Cancel(e.ctx, "n1"); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	if o := e.await(ch); o.Status != runstate.Cancelled {
		t.Fatalf("run n1: %s (%s); want cancelled", o.Status, o.Error)
	}
	e.close()
	if strings.Contains(logs.String(), "step failed") {
		t.Fatalf("a cancelled step logged a failure:\n%s", logs.String())
	}
}
