package main

import (
	"os"
	"os/exec"
	"testing"
)

// TestPeersJSONLines runs a tiny peers benchmark on a file store and checks
// that each system printed its line and that the ratio is theirs. It
// builds the DBOS module (two minutes on a 2-core machine), so it runs in
// `make bench-smoke` (TQW_BENCH_SMOKE=1), not in the unit suite.
func TestPeersJSONLines(t *testing.T) {
	if os.Getenv("TQW_BENCH_SMOKE") == "" {
		t.Skip("builds the DBOS peer: run `make bench-smoke` (TQW_BENCH_SMOKE=1)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the peers benchmark builds bench/dbos with the go command, which is not on PATH")
	}
	store := "file://" + t.TempDir()
	out := runLines(t, "peers", "--store", store, "--concurrency", "2", "--ops", "8")
	lines := map[string]map[string]any{}
	for _, r := range out {
		if r["bench"] != "peers" || r["concurrency"] != 2.0 {
			t.Fatalf("unexpected line %v", r)
		}
		key, _ := r["system"].(string)
		if ratio, ok := r["ratio"].(string); ok {
			key = "ratio " + ratio
		}
		if _, dup := lines[key]; dup {
			t.Fatalf("two %q lines: %v", key, out)
		}
		lines[key] = r
	}
	tqw, dbos, ratio := lines["tqw-file"], lines["dbos-sqlite"], lines["ratio tqw-file/dbos-sqlite"]
	if tqw == nil || dbos == nil || ratio == nil || len(lines) != 3 {
		t.Fatalf("want a tqw-file, a dbos-sqlite and a ratio line, got: %v", out)
	}
	for _, r := range []map[string]any{tqw, dbos} {
		if r["ops"].(float64) < 8 || r["steps_per_sec"].(float64) <= 0 || r["steps_per_run"] != 10.0 {
			t.Errorf("bad line %v", r)
		}
	}
	if tqw["store"] != store {
		t.Errorf("tqw line store = %v, want %s", tqw["store"], store)
	}
	if dbos["sqlite_synchronous"] != "FULL" {
		t.Errorf("dbos ran with synchronous %v, want FULL", dbos["sqlite_synchronous"])
	}
	want := tqw["steps_per_sec"].(float64) / dbos["steps_per_sec"].(float64)
	if got := ratio["steps_per_sec_ratio"].(float64); got != want {
		t.Errorf("ratio = %v, want %v", got, want)
	}
}
