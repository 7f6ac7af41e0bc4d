package dsl

import (
	"bytes"
	"strings"
	"testing"
)

// The Mermaid labels hold every character of an expression through
// entity codes: a quote or a bar cannot end the label, a tag cannot
// become markup (Mermaid sanitizes labels as HTML, dropping tags), and
// &, # read back as themselves.
func TestMermaidLabelsAreEscaped(t *testing.T) {
	src := "tqw: v1\nname: esc\nsteps:\n" +
		"  - id: a\n    switch:\n      - when: 'input.note == \"<script>alert(1)</script>\" && input.n > 1 && input.tag in [\"a|b\", \"#quot;\"]'\n        next: b\n    next: b\n" +
		"  - id: b\n    succeed: ok\n"
	w, diags, err := Parse("esc.yaml", []byte(src))
	if err != nil || diags.HasErrors() {
		t.Fatalf("%v %s", err, diags)
	}
	var m bytes.Buffer
	if err := w.WriteMermaid(&m); err != nil {
		t.Fatal(err)
	}
	want := `s_a -->|"input.note == #quot;#lt;script#gt;alert(1)#lt;/script#gt;#quot; #amp;#amp; input.n #gt; 1 #amp;#amp; input.tag in [#quot;a#124;b#quot;, #quot;#35;quot;#quot;]"| s_b`
	if !strings.Contains(m.String(), want) {
		t.Errorf("mermaid lacks %s:\n%s", want, m.String())
	}
}
