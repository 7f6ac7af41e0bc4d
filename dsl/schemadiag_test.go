package dsl

import "testing"

// A schema with several invalid properties used to be reported at
// whichever the validator visited first, in map order, so two loads of one
// file (FuzzConcurrentLoad's sequential and concurrent ones) disagreed.
func TestInvalidSchemaDiagnosticIsDeterministic(t *testing.T) {
	src := []byte("tqw: v1\nname: t\nsteps:\n  - id: w\n    action: wait_signal\n    with:\n      timeout: 1h\n      schema:\n        properties: {b: null, a: null, c: null, d: null, e: null, f: null}\n    on_timeout: w\n")
	_, first, err := Parse("s.yaml", src)
	if err == nil {
		t.Fatal("loaded")
	}
	for range 50 {
		if _, again, _ := Parse("s.yaml", src); again.String() != first.String() {
			t.Fatalf("diagnostics differ between loads:\n%s\n%s", first, again)
		}
	}
	want := "s.yaml:9:9: error: with.schema is not a valid JSON Schema: at /properties/a: got null, want boolean or object [with.invalid]"
	if got := first.Errors()[0].String(); len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("diagnostic %q, want %q", got, want)
	}
}
