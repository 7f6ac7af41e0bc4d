package builtin_test

import (
	"context"
	"errors"
	nethttp "net/http"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/actions/llm"
)

func TestShellToggle(t *testing.T) {
	r := builtin.New(builtin.Options{})
	if got := r.Names(); !reflect.DeepEqual(got, []string{"http", "llm"}) {
		t.Fatalf("Names = %v", got)
	}
	if _, ok := r.Lookup("shell"); ok {
		t.Fatal("shell present although disabled")
	}
	r = builtin.New(builtin.Options{EnableShell: true})
	if got := r.Names(); !reflect.DeepEqual(got, []string{"http", "llm", "shell"}) {
		t.Fatalf("Names = %v", got)
	}
	if err := r.Register(named("http")); !errors.Is(err, actions.ErrDuplicate) {
		t.Fatalf("replacing a built-in: %v", err)
	}
}

type named string

func (n named) Name() string                                        { return string(n) }
func (n named) Execute(context.Context, *actions.Call) (any, error) { return nil, nil }

type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(*nethttp.Request) (*nethttp.Response, error) {
	c.n.Add(1)
	return nil, errors.New("counted")
}

func TestSharedHTTPClient(t *testing.T) {
	tr := &countingTransport{}
	r := builtin.New(builtin.Options{HTTPClient: &nethttp.Client{Transport: tr}, LLM: llm.Options{BaseURL: "http://example.invalid/v1"}})
	for name, args := range map[string]map[string]any{
		"http": {"url": "http://example.invalid/"},
		"llm":  {"model": "m", "prompt": "p"},
	} {
		a, _ := r.Lookup(name)
		_, err := a.Execute(context.Background(), &actions.Call{RunID: "r", StepID: "s", Attempt: 1, Args: args})
		if !actions.IsType(err, actions.TypeHTTPConnection) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if tr.n.Load() != 2 {
		t.Fatalf("shared client used %d times, want 2", tr.n.Load())
	}
}
