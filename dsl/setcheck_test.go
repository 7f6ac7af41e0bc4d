package dsl

import (
	"strings"
	"testing"
)

func TestSetReadsAssignedWarning(t *testing.T) {
	for _, c := range []struct {
		name, set string
		want      []string // the messages' "X reads vars.Y" parts
	}{
		{"issue example", `{i: "${ vars.i - 1 }", trail: "${ vars.trail + string(vars.i) }"}`, []string{"trail reads vars.i"}},
		{"keys swapped", `{trail: "${ vars.trail + string(vars.i) }", i: "${ vars.i - 1 }"}`, []string{"trail reads vars.i"}},
		{"index syntax", `{i: "${ vars['i'] - 1 }", trail: "${ vars['trail'] + string(vars['i']) }"}`, []string{"trail reads vars.i"}},
		{"both ways", `{a: "${ vars.b }", b: "${ vars.a }"}`, []string{"a reads vars.b", "b reads vars.a"}},
		{"self only", `{i: "${ vars.i + 1 }", n: "${ vars.n * 2 }"}`, nil},
		{"other vars", `{i: "${ vars.j }", k: "x${ vars.m }y"}`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "tqw: v1\nname: t\nvars: {i: 1, j: 2, m: 3, n: 4, trail: \"\", a: 1, b: 2}\nsteps:\n  - id: s\n    set: " + c.set + "\n  - id: done\n    succeed: \"${ vars }\"\n"
			w, diags, err := Parse("t.yaml", []byte(src))
			if err != nil || w == nil {
				t.Fatalf("a warning must leave the workflow valid: %v", err)
			}
			var got []string
			for _, d := range diags {
				if d.Code != CodeSetReadsAssigned {
					continue
				}
				if d.Severity != SeverityWarning || d.Line != 6 || d.Col < 10 || !strings.Contains(d.Message, "sees the old value") || d.Hint == "" {
					t.Errorf("diagnostic %+v: want a warning on line 6 saying the value sees the old value, with a hint", d)
				}
				for _, w := range c.want {
					if strings.Contains(d.Message, w) {
						got = append(got, w)
					}
				}
			}
			if len(got) != len(c.want) || strings.Count(diags.String(), CodeSetReadsAssigned) != len(c.want) {
				t.Fatalf("want %q; got:\n%s", c.want, diags)
			}
		})
	}
}
