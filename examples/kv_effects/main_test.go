package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKVEffects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	store := "file://" + filepath.ToSlash(t.TempDir())
	if err := run(ctx, []string{"--store", store, "--order", "7"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"step 0 (attempt 1): status \"received\", 8 chairs in stock; packing\n",
		"step 1 (attempt 1): status \"packed\", shipped_by present: false\n",
		"step 1 (attempt 2): status \"packed\", shipped_by present: false\n",
		"run order-7 succeeded: shipped\n",
		"KVGet orders/7/status = \"shipped\"\n",
		"KVGet orders/7/hold: deleted by step 0\n",
		"KVScan orders/7/: orders/7/shipped_by = \"attempt-2\"\n",
		"KVScan stock/: stock/chair = \"7\"\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "KVScan orders/7/:"); n != 2 {
		t.Errorf("want 2 order keys (status, shipped_by), got %d:\n%s", n, got)
	}
}
