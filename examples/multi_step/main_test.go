package main

import (
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
)

func TestMultiStep(t *testing.T) {
	got := exampletest.MustRun(t, run, "--store", exampletest.FileStore(t), "--order", "2 chair, 1 lamp")
	// 2*40.00 + 29.99 = 109.99; tax 20% = 21.99 (cents truncated); total 131.98.
	exampletest.Contains(t, got,
		`step 0: {"text":"2 chair, 1 lamp","items":[{"name":"chair","count":2},{"name":"lamp","count":1}]}`,
		`"subtotal_cents":10999}`,
		`"tax_cents":2199}`,
		"step 3: summary: 2 items, total 131.98\n",
		"succeeded after step 3: 2 items, total 131.98\n",
	)
}

func TestMultiStepBadOrderFails(t *testing.T) {
	out, err := exampletest.Run(run, "--order", "2 sofa")
	if err == nil || !strings.Contains(err.Error(), `failed: no price for "sofa"`) {
		t.Fatalf("run = %v, want a failed run naming the sofa\n%s", err, out)
	}
	if !strings.Contains(out, "failed after step 1") {
		t.Errorf("want the run to fail at step 1:\n%s", out)
	}
}
