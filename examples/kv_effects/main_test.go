package main

import (
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
)

func TestKVEffects(t *testing.T) {
	got := exampletest.MustRun(t, run, "--store", exampletest.FileStore(t), "--order", "7")
	exampletest.Contains(t, got,
		"step 0 (attempt 1): status \"received\", 8 chairs in stock; packing\n",
		"step 1 (attempt 1): status \"packed\", shipped_by present: false\n",
		"step 1 (attempt 2): status \"packed\", shipped_by present: false\n",
		"run order-7 succeeded: shipped\n",
		"KVGet orders/7/status = \"shipped\"\n",
		"KVGet orders/7/hold: deleted by step 0\n",
		"KVScan orders/7/: orders/7/shipped_by = \"attempt-2\"\n",
		"KVScan stock/: stock/chair = \"7\"\n",
	)
	if n := strings.Count(got, "KVScan orders/7/:"); n != 2 {
		t.Errorf("want 2 order keys (status, shipped_by), got %d:\n%s", n, got)
	}
}
