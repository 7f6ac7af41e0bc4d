package main

import (
	"regexp"
	"testing"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
)

func TestSingleStep(t *testing.T) {
	out := exampletest.MustRun(t, run, "--store", exampletest.FileStore(t), "--input", "ship it")
	var ids []string
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^submitted run (\S+)$`),
		regexp.MustCompile(`(?m)^step 0 of run (\S+): "ship it"$`),
		regexp.MustCompile(`(?m)^run (\S+) succeeded: "SHIP IT"$`),
	} {
		m := want.FindAllStringSubmatch(out, -1)
		if len(m) != 1 {
			t.Fatalf("want one line matching %s, got %d in:\n%s", want, len(m), out)
		}
		ids = append(ids, m[0][1])
	}
	if ids[0] != ids[1] || ids[0] != ids[2] {
		t.Errorf("run ids differ: %q", ids)
	}
}
