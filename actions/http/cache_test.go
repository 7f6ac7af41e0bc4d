package http_test

import (
	"context"
	"fmt"
	nethttp "net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/http"
)

// memAnswers is an answer store in memory.
type memAnswers struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (a *memAnswers) Get(_ context.Context, key string) ([]byte, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.m[key]
	return v, ok, nil
}

func (a *memAnswers) Put(_ context.Context, key string, v []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[key] = append([]byte(nil), v...)
	return nil
}

// cacheCall is a call of run with the shared answers, reusing them or not.
func cacheCall(run string, args map[string]any, answers *memAnswers, reuse bool) *actions.Call {
	return &actions.Call{RunID: run, StepID: "fetch", Attempt: 1, Args: args, Answers: answers, ReuseAnswers: reuse}
}

// A cached GET is kept once paid; a call that reuses answers (another
// run: its Idempotency-Key differs) gets it without a request, one that
// does not sends the request; a different header is a different request.
func TestCacheReusesAGet(t *testing.T) {
	srv, reqs := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"n": %d, "who": %q}`, len(r.Header.Get("X-Who")), r.Header.Get("X-Who"))
	})
	answers := &memAnswers{m: map[string][]byte{}}
	args := func(who string) map[string]any {
		return map[string]any{"url": srv.URL + "/x?q=1", "headers": map[string]any{"X-Who": who}, "cache": true}
	}
	a := http.New(http.Options{})
	first, err := a.Execute(context.Background(), cacheCall("r1", args("ann"), answers, false))
	if err != nil {
		t.Fatal(err)
	}
	if len(answers.m) != 1 {
		t.Fatalf("answers kept: %d; want 1", len(answers.m))
	}
	for k := range answers.m {
		if !strings.HasPrefix(k, "http/") || len(k) != len("http/")+64 {
			t.Fatalf("answer key %q; want http/<hex sha256>", k)
		}
	}
	again, err := a.Execute(context.Background(), cacheCall("r2", args("ann"), answers, true))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("reused %#v; want %#v", again, first)
	}
	if n := len(reqs()); n != 1 {
		t.Fatalf("%d requests; the reusing call should have sent none", n)
	}
	if _, err := a.Execute(context.Background(), cacheCall("r3", args("ann"), answers, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Execute(context.Background(), cacheCall("r4", args("bob"), answers, true)); err != nil {
		t.Fatal(err)
	}
	if n := len(reqs()); n != 3 {
		t.Fatalf("%d requests; want 3 (a call not reusing answers, and one with another header, send theirs)", n)
	}
}

// Only a response that passed expect_status and fits MaxCachedBytes is kept.
func TestCacheKeepsOnlyGoodSmallResponses(t *testing.T) {
	srv, _ := server(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		switch r.URL.Path {
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", http.MaxCachedBytes+1)))
		case "/bad":
			w.WriteHeader(nethttp.StatusNotFound)
		}
	})
	answers := &memAnswers{m: map[string][]byte{}}
	a := http.New(http.Options{})
	if _, err := a.Execute(context.Background(), cacheCall("r1", map[string]any{"url": srv.URL + "/big", "cache": true}, answers, false)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Execute(context.Background(), cacheCall("r1", map[string]any{"url": srv.URL + "/bad", "cache": true}, answers, false))
	wantError(t, err, actions.TypeHTTP4xx, false, 404)
	if len(answers.m) != 0 {
		t.Fatalf("kept %d answers; want none", len(answers.m))
	}
}

// A method cache does not allow fails the step (a method from an
// expression escapes the loader's check); cache.methods widens it.
func TestCacheMethods(t *testing.T) {
	srv, reqs := server(t, func(nethttp.ResponseWriter, *nethttp.Request) {})
	answers := &memAnswers{m: map[string][]byte{}}
	a := http.New(http.Options{})
	_, err := a.Execute(context.Background(), cacheCall("r1", map[string]any{"url": srv.URL, "method": "POST", "cache": true}, answers, false))
	if e := wantError(t, err, actions.TypeValidation, false, 0); !strings.Contains(e.Message, "POST is not cached") {
		t.Fatalf("message %q", e.Message)
	}
	if len(reqs()) != 0 {
		t.Fatal("a refused cached POST was sent")
	}
	post := map[string]any{"url": srv.URL, "method": "POST", "body": map[string]any{"q": "x"}, "cache": map[string]any{"methods": []any{"post"}}}
	if _, err := a.Execute(context.Background(), cacheCall("r1", post, answers, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Execute(context.Background(), cacheCall("r2", post, answers, true)); err != nil {
		t.Fatal(err)
	}
	if len(reqs()) != 1 || len(answers.m) != 1 {
		t.Fatalf("%d requests, %d answers; want the second POST served from the store", len(reqs()), len(answers.m))
	}
	for _, bad := range []any{"yes", map[string]any{"methods": []any{}}, map[string]any{"methods": []any{"FETCH"}}, map[string]any{"ttl": 1}} {
		_, err := a.Execute(context.Background(), cacheCall("r1", map[string]any{"url": srv.URL, "cache": bad}, answers, false))
		wantError(t, err, actions.TypeValidation, false, 0)
	}
}
