package server

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
)

// fill sets every exported field of the struct v points to, nested
// structs behind pointers included, to a value that is not zero, so that
// omitempty omits nothing and a field a conversion drops shows.
func fill(v reflect.Value) {
	v = v.Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		switch {
		case f.Type() == reflect.TypeFor[time.Time]():
			f.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))))
		case f.Kind() == reflect.String:
			f.SetString(v.Type().Field(i).Name + " value")
		case f.CanInt():
			f.SetInt(int64(i + 1))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
			f.Set(reflect.New(f.Type().Elem()))
			fill(f)
		}
	}
}

func filled[T any]() T {
	var v T
	fill(reflect.ValueOf(&v))
	return v
}

func sameJSON(t *testing.T, what string, engine, wire any) {
	t.Helper()
	a, err := json.Marshal(engine)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("%s: the wire type encodes\n%s\nthe engine's\n%s", what, b, a)
	}
}

// The bodies carry the engine's types byte for byte, as the server sent
// them when it encoded the engine's types directly.
func TestWireConversionsEncodeAsTheEngine(t *testing.T) {
	ds := dsl.Diagnostics{filled[dsl.Diagnostic](), {File: "f", Severity: dsl.SeverityWarning}}
	sameJSON(t, "diagnostics", ds, wireDiagnostics(ds))
	sameJSON(t, "no diagnostics", dsl.Diagnostics{}, wireDiagnostics(nil))
	e := filled[dsl.ErrorInfo]()
	sameJSON(t, "error info", &e, wireErrorInfo(&e))
	sameJSON(t, "no error info", (*dsl.ErrorInfo)(nil), wireErrorInfo(nil))
	r := filled[interpreter.RejectedSignal]()
	sameJSON(t, "rejected signal", &r, wireRejectedSignal(&r))
	sameJSON(t, "no rejected signal", (*interpreter.RejectedSignal)(nil), wireRejectedSignal(nil))
	ev := filled[interpreter.Event]()
	sameJSON(t, "step event", ev, wireStepEvent(ev))
	sameJSON(t, "a start event", interpreter.Event{Kind: "start", RunID: "r", Step: "s", Attempt: 1}, wireStepEvent(interpreter.Event{Kind: "start", RunID: "r", Step: "s", Attempt: 1}))
}
