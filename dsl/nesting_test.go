package dsl

import (
	"strings"
	"testing"
	"time"
)

func nestedSetWorkflow(expr string) []byte {
	return []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    set: {x: \"${ " + expr + " }\"}\n")
}

// An expression whose brackets nest half a million deep (it fits the 1 MiB
// file limit) used to overflow the goroutine stack inside expr's parser, a
// fatal error that killed the process; it is a diagnostic at the bracket.
func TestDeeplyNestedExpressionIsADiagnostic(t *testing.T) {
	const n = 500_000
	for name, expr := range map[string]string{
		"parentheses": strings.Repeat("(", n) + "1" + strings.Repeat(")", n),
		"lists":       strings.Repeat("[", n) + strings.Repeat("]", n),
		"maps":        strings.Repeat("{a: ", n/3) + "1" + strings.Repeat("}", n/3),
	} {
		start := time.Now()
		w, diags, err := Parse("deep.yaml", nestedSetWorkflow(expr))
		t.Logf("%s: %v", name, time.Since(start))
		if err == nil || w != nil {
			t.Fatalf("%s: loaded", name)
		}
		if !diags.HasErrors() || !strings.Contains(diags.String(), "nest deeper than 256 levels") {
			t.Fatalf("%s: diagnostics %v", name, diags)
		}
		for _, d := range diags {
			if d.Line != 5 || d.Col < 1 {
				t.Fatalf("%s: diagnostic at %d:%d, want line 5: %s", name, d.Line, d.Col, d)
			}
		}
	}
	// Nesting up to the limit compiles, brackets in string literals do not
	// count, and unbalanced ones are still the parser's error.
	for _, ok := range []string{
		strings.Repeat("(", 256) + "1" + strings.Repeat(")", 256),
		"'" + strings.Repeat("(", 1000) + "' + 'x'",
	} {
		if _, diags, err := Parse("ok.yaml", nestedSetWorkflow(ok)); err != nil {
			t.Fatalf("%.40q...: %v", ok, diags)
		}
	}
	if _, diags, err := Parse("bad.yaml", nestedSetWorkflow("(1")); err == nil || strings.Contains(diags.String(), "nest deeper") {
		t.Fatalf("unbalanced: %v", diags)
	}
}
