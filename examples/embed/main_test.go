package main

import (
	"regexp"
	"testing"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
)

func TestEmbed(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"one two three", `short text: 3 words`},
		{"a durable workflow engine in a few lines", `long text: 8 words`},
	} {
		out := exampletest.MustRun(t, run, "--store", exampletest.FileStore(t), "--text", c.text)
		if !regexp.MustCompile(`(?m)^run \S+ succeeded: ` + c.want + `$`).MatchString(out) {
			t.Errorf("text %q: printed\n%s\nwant a line ending in %q", c.text, out, c.want)
		}
	}
}
