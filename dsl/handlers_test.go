package dsl

import (
	"strings"
	"testing"
	"time"
)

// on_error and finally steps read error and run.outcome in every
// expression; the run's own steps read error only in retry.when and
// catch. The run timeout is loaded as a duration.
func TestHandlersReadErrorAndOutcome(t *testing.T) {
	src := `tqw: v1
name: t
timeout: 1d12h
steps:
  - id: work
    action: sleep
    with: {duration: 1s}
on_error:
  - id: undo
    action: shell
    with: {command: 'echo ${ error.type } ${ error.step } ${ run.outcome }'}
    set: {why: "${ error.message }"}
finally:
  - id: tell
    switch:
      - when: run.outcome == "succeeded" && error.type == ""
        next: quiet
  - id: quiet
    succeed: "${ vars.why ?? run.outcome }"
`
	w, diags, err := Parse("t.yaml", []byte(src))
	if err != nil || len(diags) != 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	if w.Timeout != 36*time.Hour {
		t.Fatalf("timeout %v; want 36h", w.Timeout)
	}
	if w.OnError == nil || w.OnError.Steps[0].ID != "undo" || w.Finally == nil || len(w.Finally.Steps) != 2 {
		t.Fatalf("handler blocks %+v %+v", w.OnError, w.Finally)
	}
	bad := strings.Replace(src, "with: {duration: 1s}", "with: {duration: \"${ error.type }\"}", 1)
	_, diags, _ = Parse("t.yaml", []byte(bad))
	if len(diags) != 1 || diags[0].Code != CodeExprCompile || !strings.Contains(diags[0].Hint, "on_error and finally") {
		t.Fatalf("error read in a run step: want one %s naming where error is readable, got:\n%s", CodeExprCompile, diags)
	}
}
