package actions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
)

type nopAction struct{ name string }

func (a nopAction) Name() string { return a.name }
func (a nopAction) Execute(context.Context, *actions.Call) (any, error) {
	return a.name, nil
}

func TestRegistry(t *testing.T) {
	r, err := actions.NewRegistry(nopAction{"b"}, nopAction{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Names(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("Names = %v", got)
	}
	if a, ok := r.Lookup("a"); !ok || a.Name() != "a" {
		t.Fatalf("Lookup(a) = %v, %v", a, ok)
	}
	if _, ok := r.Lookup("c"); ok {
		t.Fatal("Lookup(c) found an action that was never registered")
	}
	err = r.Register(nopAction{"a"})
	if !errors.Is(err, actions.ErrDuplicate) {
		t.Fatalf("duplicate Register: %v, want ErrDuplicate", err)
	}
	if err := r.Register(nopAction{""}); err == nil {
		t.Fatal("empty name accepted")
	}
	if err := r.Register(nil); err == nil {
		t.Fatal("nil action accepted")
	}
	if _, err := actions.NewRegistry(nopAction{"x"}, nopAction{"x"}); !errors.Is(err, actions.ErrDuplicate) {
		t.Fatalf("NewRegistry with a repeated name: %v", err)
	}
	var zero actions.Registry
	if err := zero.Register(nopAction{"z"}); err != nil {
		t.Fatalf("zero Registry: %v", err)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	r, _ := actions.NewRegistry()
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			_ = r.Register(nopAction{fmt.Sprint(i)})
			r.Lookup("0")
			r.Names()
		}()
	}
	for range 8 {
		<-done
	}
	if n := len(r.Names()); n != 8 {
		t.Fatalf("%d actions registered, want 8", n)
	}
}

func TestNewErrorWraps(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	e := actions.NewError(actions.TypeHTTPConnection, true, "reading %s: %w", "x", cause).WithStatus(502)
	if !errors.Is(e, io.ErrUnexpectedEOF) {
		t.Fatal("cause not reachable with errors.Is")
	}
	if e.Error() != "http.connection: reading x: unexpected EOF" {
		t.Fatalf("Error() = %q", e.Error())
	}
	wrapped := fmt.Errorf("step: %w", e)
	got, ok := actions.AsError(wrapped)
	if !ok || got.Status != 502 || !got.Retryable {
		t.Fatalf("AsError = %+v, %v", got, ok)
	}
	if !actions.IsType(wrapped, actions.TypeHTTPConnection) || actions.IsType(wrapped, actions.TypeTimeout) {
		t.Fatal("IsType wrong")
	}
	if e := actions.NewError("custom.x", false, "no cause"); e.Err != nil {
		t.Fatalf("Err = %v, want nil without %%w", e.Err)
	}
}

func TestContextError(t *testing.T) {
	if e := actions.ContextError(context.Background(), "x"); e != nil {
		t.Fatalf("live context: %v", e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := actions.ContextError(ctx, "x")
	if e == nil || e.Type != actions.TypeCancelled || e.Retryable {
		t.Fatalf("cancelled: %+v", e)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	e = actions.ContextError(ctx, "x")
	if e == nil || e.Type != actions.TypeTimeout || !e.Retryable || !errors.Is(e, context.DeadlineExceeded) {
		t.Fatalf("deadline: %+v", e)
	}
}

func TestCallHelpers(t *testing.T) {
	var c *actions.Call
	c.Log().Info("discarded") // nil-safe
	if _, ok := c.LookupSecret("X"); ok {
		t.Fatal("nil call has a secret")
	}
	c = &actions.Call{RunID: "r1", StepID: "s1", Secret: func(n string) (string, bool) { return "v-" + n, n == "A" }}
	if v, ok := c.LookupSecret("A"); !ok || v != "v-A" {
		t.Fatalf("LookupSecret = %q, %v", v, ok)
	}
	if c.IdempotencyKey() != "r1/s1" {
		t.Fatalf("IdempotencyKey = %q", c.IdempotencyKey())
	}
}

type status []int

func (s *status) DecodeArg(v any) error {
	n, err := actions.Int64(v)
	if err != nil {
		return &actions.ArgError{Field: "[0]", Problem: err.Error()}
	}
	*s = status{int(n)}
	return nil
}

type testArgs struct {
	URL     string            `arg:"url,required"`
	N       int               `arg:"n"`
	U8      uint8             `arg:"u8"`
	F       float64           `arg:"f"`
	B       bool              `arg:"b"`
	D       time.Duration     `arg:"d"`
	H       map[string]string `arg:"h"`
	L       []string          `arg:"l"`
	Body    any               `arg:"body"`
	P       *int64            `arg:"p"`
	S       status            `arg:"s"`
	Skipped string            // no tag: not an argument
}

func TestDecodeArgs(t *testing.T) {
	var a testArgs
	err := actions.DecodeArgs(map[string]any{
		"url": "http://x", "n": float64(3), "u8": json.Number("200"), "f": 1, "b": true, "d": "1d2h",
		"h": map[string]any{"A": "1"}, "l": []any{"x", "y"}, "body": map[string]any{"k": []any{json.Number("1.5")}},
		"p": int64(7), "s": 404, "unused": nil,
	}, &a)
	if err == nil || !strings.Contains(err.Error(), `"unused"`) {
		t.Fatalf("unknown key (even nil) must be reported: %v", err)
	}
	a = testArgs{}
	err = actions.DecodeArgs(map[string]any{
		"url": "http://x", "n": float64(3), "u8": json.Number("200"), "f": 1, "b": true, "d": "1d2h",
		"h": map[string]any{"A": "1"}, "l": []any{"x", "y"}, "body": map[string]any{"k": []any{json.Number("1.5")}},
		"p": int64(7), "s": 404,
	}, &a)
	if err != nil {
		t.Fatal(err)
	}
	want := testArgs{URL: "http://x", N: 3, U8: 200, F: 1, B: true, D: 26 * time.Hour,
		H: map[string]string{"A": "1"}, L: []string{"x", "y"}, Body: map[string]any{"k": []any{1.5}}, S: status{404}}
	p := int64(7)
	want.P = &p
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("got %+v\nwant %+v", a, want)
	}
}

func TestDecodeArgsErrors(t *testing.T) {
	cases := []struct {
		args  map[string]any
		field string
		text  string
	}{
		{map[string]any{}, "url", "required"},
		{map[string]any{"url": nil}, "url", "required"},
		{map[string]any{"url": 3}, "url", "want a string, got number 3"},
		{map[string]any{"url": "x", "urll": "y"}, "urll", "unknown argument; known arguments: b, body, d, f"},
		{map[string]any{"url": "x", "n": 1.5}, "n", "want an integer"},
		{map[string]any{"url": "x", "n": "3"}, "n", `want an integer, got string "3"`},
		{map[string]any{"url": "x", "u8": 256}, "u8", "out of range"},
		{map[string]any{"url": "x", "u8": -1}, "u8", "out of range"},
		{map[string]any{"url": "x", "f": "1"}, "f", "want a number"},
		{map[string]any{"url": "x", "b": "true"}, "b", "want true or false"},
		{map[string]any{"url": "x", "d": 30}, "d", "want a duration string"},
		{map[string]any{"url": "x", "d": "30 parsecs"}, "d", "write a number with a unit"},
		{map[string]any{"url": "x", "d": "-1s"}, "d", "negative"},
		{map[string]any{"url": "x", "h": "a"}, "h", "want an object"},
		{map[string]any{"url": "x", "h": map[string]any{"A": 1}}, "h.A", "want a string"},
		{map[string]any{"url": "x", "h": map[string]any{"A": nil}}, "h.A", "must not be null"},
		{map[string]any{"url": "x", "l": "a"}, "l", "want a list"},
		{map[string]any{"url": "x", "l": []any{"a", true}}, "l[1]", "want a string"},
		{map[string]any{"url": "x", "s": "x"}, "s[0]", "want an integer"},
		{map[string]any{"url": "x", "body": func() {}}, "body", "not JSON-compatible"},
		{map[string]any{"url": "x", "Skipped": "y"}, "Skipped", "unknown argument"},
	}
	for _, c := range cases {
		var a testArgs
		err := actions.DecodeArgs(c.args, &a)
		e, ok := actions.AsError(err)
		if !ok || e.Type != actions.TypeValidation || e.Retryable {
			t.Errorf("%v: err = %v, want a validation *Error", c.args, err)
			continue
		}
		var ae *actions.ArgError
		if !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("%v: field = %+v, want %q", c.args, ae, c.field)
		}
		if !strings.Contains(err.Error(), c.text) {
			t.Errorf("%v: %q does not mention %q", c.args, err, c.text)
		}
	}
}

func TestDecodeArgsBadDestination(t *testing.T) {
	if err := actions.DecodeArgs(nil, testArgs{}); err == nil {
		t.Fatal("non-pointer accepted")
	}
	type bad struct {
		C chan int `arg:"c"`
	}
	if err := actions.DecodeArgs(map[string]any{"c": 1}, &bad{}); err == nil || actions.IsType(err, actions.TypeValidation) {
		t.Fatalf("unsupported field type: %v, want a programming error, not validation", err)
	}
	type dup struct {
		A string `arg:"a"`
		B string `arg:"a"`
	}
	if err := actions.DecodeArgs(nil, &dup{}); err == nil {
		t.Fatal("duplicate tag accepted")
	}
}

func TestDecodeJSON(t *testing.T) {
	v, err := actions.DecodeJSON([]byte(`{"id": 9007199254740993, "f": 1.5, "e": 1e2, "l": [true, null, "s"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": int64(9007199254740993), "f": 1.5, "e": 100.0, "l": []any{true, nil, "s"}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
	for _, bad := range []string{``, `{`, `{} {}`, `[1,]`, `{"a":1}x`} {
		if _, err := actions.DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("DecodeJSON(%q) accepted", bad)
		}
	}
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	if _, err := actions.DecodeJSON([]byte(deep)); err == nil {
		t.Error("20000 levels of nesting accepted")
	}
}

func TestNormalize(t *testing.T) {
	v, err := actions.Normalize(map[string]any{"a": 1, "b": uint16(2), "c": float32(0.5), "d": []string{"x"}, "e": map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": int64(1), "b": int64(2), "c": 0.5, "d": []any{"x"}, "e": map[string]any{"k": "v"}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
	for _, bad := range []any{struct{}{}, []int{1}, map[string]any{"x": make(chan int)}} {
		if _, err := actions.Normalize(bad); err == nil {
			t.Errorf("Normalize(%T) accepted", bad)
		}
	}
}

// FuzzDecodeArgs feeds arbitrary JSON objects to the decoder: it must never
// panic, must fail only with validation errors, and must be deterministic.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{
		`{"url":"http://x"}`, `{"url":"x","n":1e300}`, `{"url":"x","d":"1.5d3h"}`, `{"url":"x","h":{"a":"b"},"l":["c"]}`,
		`{"url":"x","s":[1]}`, `{"url":"x","p":-9223372036854775808}`, `{"url":"x","u8":-0}`, `{"url":"x","body":[[[{}]]]}`,
		`{"n":9223372036854775807}`, `{"url":"x","d":"99999999999d"}`, `{"url":"x","f":1e400}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, useNumber bool) {
		dec := json.NewDecoder(strings.NewReader(string(data)))
		if useNumber {
			dec.UseNumber()
		}
		var m map[string]any
		if dec.Decode(&m) != nil {
			return
		}
		var a, b testArgs
		err1 := actions.DecodeArgs(m, &a)
		err2 := actions.DecodeArgs(m, &b)
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("not deterministic: %v vs %v", err1, err2)
		}
		if err1 != nil {
			var ae *actions.ArgError
			if !actions.IsType(err1, actions.TypeValidation) || !errors.As(err1, &ae) {
				t.Fatalf("error without a field: %v", err1)
			}
			if _, emptyKey := m[""]; ae.Field == "" && !emptyKey {
				t.Fatalf("error with an empty field: %v", err1)
			}
			return
		}
		if a.URL == "" && m["url"] != "" {
			t.Fatalf("url lost: %v", m)
		}
		if a.Body != nil {
			if _, err := json.Marshal(a.Body); err != nil {
				t.Fatalf("body not JSON-compatible: %v", err)
			}
		}
	})
}

// FuzzDecodeJSON checks that DecodeJSON never panics and that what it
// accepts is valid JSON made of output types only.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2.5,"x",null,true]`, `1e999`, `{"a":{"b":[{}]}}`, `"\ud800"`, `-0`, `123456789012345678901234567890`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := actions.DecodeJSON(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		checkOutputTypes(t, v)
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("result does not marshal: %v", err)
		}
	})
}

func checkOutputTypes(t *testing.T, v any) {
	switch x := v.(type) {
	case nil, bool, string, int64, float64:
	case []any:
		for _, e := range x {
			checkOutputTypes(t, e)
		}
	case map[string]any:
		for _, e := range x {
			checkOutputTypes(t, e)
		}
	default:
		t.Fatalf("non-output type %T", v)
	}
}
