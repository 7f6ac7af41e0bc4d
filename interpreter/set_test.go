package interpreter

import (
	"strings"
	"testing"
)

// TestSetReadsVariablesBeforeTheSet runs issue 12's countdown with the
// keys of its set in both orders: every value reads the variables as they
// were before the set, so both give the same trail.
func TestSetReadsVariablesBeforeTheSet(t *testing.T) {
	for name, set := range map[string]string{
		"i first":     `{i: "${ vars.i - 1 }", trail: "${ vars.trail + string(vars.i) }"}`,
		"trail first": `{trail: "${ vars.trail + string(vars.i) }", i: "${ vars.i - 1 }"}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			p := e.write("countdown.yaml", `
tqw: v1
name: countdown
vars: {i: 3, trail: ""}
steps:
  - id: count
    set: `+set+`
    switch:
      - when: vars.i > 0
        next: count
  - id: done
    succeed: {trail: "${ vars.trail }", i: "${ vars.i }"}
`)
			wantSucceeded(t, e.run(p, map[string]any{}, "r1"), `{"i":0,"trail":"321"}`)
		})
	}
}

// TestCatchSetReadsVariablesBeforeTheSet: the same rule in a catch rule's
// set, and switch after a step's set sees the new values.
func TestCatchSetReadsVariablesBeforeTheSet(t *testing.T) {
	for name, set := range map[string]string{
		"tries first": "tries: \"${ vars.tries + 1 }\"\n          note: \"attempt ${ vars.tries }\"",
		"note first":  "note: \"attempt ${ vars.tries }\"\n          tries: \"${ vars.tries + 1 }\"",
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			p := e.write("catch.yaml", `
tqw: v1
name: catch
vars: {tries: 0, note: ""}
steps:
  - id: boom
    action: shell
    with: {command: [sh, -c, "exit 3"]}
    catch:
      - set:
          `+set+`
        next: route
  - id: route
    set: {tries: "${ vars.tries * 10 }", seen: "${ vars.tries }"}
    switch:
      - when: vars.tries == 10
        next: done
    next: wrong
  - id: wrong
    fail: "switch did not see the new tries: ${ vars.tries }"
  - id: done
    succeed: "${ vars.note }/${ vars.tries }/${ vars.seen }"
`)
			wantSucceeded(t, e.run(p, map[string]any{}, "r1"), `"attempt 0/10/1"`)
			// The file means to read old values; the loader says so once per set.
			w := e.load(p)
			if n := strings.Count(w.Diagnostics.String(), "[set.reads-assigned]"); n != 2 {
				t.Errorf("%d set.reads-assigned warnings; want 2 (note and seen read tries):\n%s", n, w.Diagnostics)
			}
		})
	}
}
