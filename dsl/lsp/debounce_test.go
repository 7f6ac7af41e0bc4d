package lsp_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/tqw-dsl/tqw/dsl/lsp"
)

// manualTimers stands in for time.AfterFunc: nothing runs until fire.
type manualTimers struct {
	mu      sync.Mutex
	pending []*manualTimer
}

type manualTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (m *manualTimers) AfterFunc(d time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{d: d, f: f}
	m.pending = append(m.pending, t)
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fire runs every timer not stopped, and reports how many were scheduled
// and how many of them had been stopped.
func (m *manualTimers) fire() (scheduled, stopped int) {
	m.mu.Lock()
	ts := m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, t := range ts {
		if t.stopped {
			stopped++
			continue
		}
		t.f()
	}
	return len(ts), stopped
}

// startInProcess runs Serve on pipes, with the given options.
func startInProcess(t *testing.T, opts lsp.Options) *client {
	t.Helper()
	clientR, serverW := io.Pipe()
	serverR, clientW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lsp.Serve(ctx, serverR, serverW, opts) }()
	c := &client{t: t, diags: map[string][]publishedDiagnostics{}, cond: make(chan struct{})}
	stream := jsonrpc2.NewBufferedStream(rwc{clientR, clientW}, jsonrpc2.VSCodeObjectCodec{})
	c.conn = jsonrpc2.NewConn(context.Background(), stream, jsonrpc2.HandlerWithError(c.handle))
	t.Cleanup(func() {
		cancel()
		c.conn.Close()
		serverR.Close()
		clientR.Close()
		<-done
	})
	var res map[string]any
	c.call("initialize", map[string]any{"capabilities": map[string]any{}}, &res)
	return c
}

// TestDebounce checks that changes in quick succession cost one load:
// each change cancels the pending run, and only the last text's
// diagnostics are published.
func TestDebounce(t *testing.T) {
	timers := &manualTimers{}
	c := startInProcess(t, lsp.Options{Debounce: 150 * time.Millisecond, AfterFunc: timers.AfterFunc})
	const uri = "file:///work/debounce.tqw.yaml"
	c.open(uri, "tqw: v1\nname: d\nsteps: [{id: a, succeed: 1, bogus: 1}]\n")
	c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": uri, "version": 2},
		"contentChanges": []map[string]any{{"text": "tqw: v1\nname: d\nsteps: [{id: a, succeed: 1, bogos: 1}]\n"}}})
	c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": uri, "version": 3},
		"contentChanges": []map[string]any{{"text": "tqw: v1\nname: d\nsteps: [{id: a, succeed: 1, oops: 1}]\n"}}})
	// A request answered means the notifications before it were handled.
	var syms []any
	c.call("textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": uri}}, &syms)
	c.mu.Lock()
	early := len(c.diags[uri])
	c.mu.Unlock()
	if early != 0 {
		t.Fatalf("diagnostics published before the debounce ran out")
	}
	timers.mu.Lock()
	for _, tm := range timers.pending {
		if tm.d != 150*time.Millisecond {
			t.Errorf("scheduled after %v; want the debounce", tm.d)
		}
	}
	timers.mu.Unlock()
	if scheduled, stopped := timers.fire(); scheduled != 3 || stopped != 2 {
		t.Errorf("%d runs scheduled, %d cancelled; want 3 and 2", scheduled, stopped)
	}
	d := c.diagnosticsFor(uri, 3)
	if len(d) != 1 || d[0].Message != `unknown field "oops" in steps[0]` {
		t.Errorf("diagnostics %+v", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.diags[uri]); n != 1 {
		t.Errorf("%d publications; want only the last version's", n)
	}
}
