package main

import (
	"strings"
	"testing"
)

func TestObjstoreBenchJSONLines(t *testing.T) {
	for _, pack := range []string{"--pack=false", "--pack=true"} {
		t.Run(pack, func(t *testing.T) { testObjstoreBench(t, pack) })
	}
}

func testObjstoreBench(t *testing.T, pack string) {
	dir := t.TempDir()
	lines := runLines(t, "objstore", "--store", "mem://benchtest,file://"+dir, "--concurrency", "1,4",
		"--ops", "40", "--keys", "20", "--size", "100", "--list-limit", "5", pack)
	type key struct {
		op, store string
		conc      int
	}
	seen := map[key]bool{}
	for _, r := range lines {
		op, _ := r["op"].(string)
		store, _ := r["store"].(string)
		conc, _ := r["concurrency"].(float64)
		if r["bench"] != "objstore" || r["ops"].(float64) < 20 || r["p50_ms"].(float64) <= 0 || r["p99_ms"].(float64) < r["p50_ms"].(float64) {
			t.Fatalf("bad result %v", r)
		}
		perOp := map[string]string{"put": "puts_per_op", "create": "puts_per_op", "get": "gets_per_op", "list": "lists_per_op"}[op]
		if perOp == "" || r[perOp].(float64) != 1 {
			t.Fatalf("op %q: want 1 request of its kind per op: %v", op, r)
		}
		// Only the file store packs; mem has no Packer.
		if wantPacked := pack == "--pack=true" && strings.HasPrefix(store, "file://"); r["packed"] != wantPacked {
			t.Fatalf("%s %s: packed = %v, want %v", store, pack, r["packed"], wantPacked)
		}
		if cpu, _ := r["cpu_us_per_op"].(float64); cpu <= 0 {
			t.Fatalf("no process CPU per op: %v", r)
		}
		seen[key{op, store, int(conc)}] = true
	}
	if len(seen) != 4*2*2 {
		t.Fatalf("got %d distinct (op, store, concurrency) results, want 16: %v", len(seen), seen)
	}
	for k := range seen {
		if !strings.HasPrefix(k.store, "mem://") && !strings.HasPrefix(k.store, "file://") {
			t.Fatalf("store %q", k.store)
		}
	}
}
