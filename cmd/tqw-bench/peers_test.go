package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

// TestPeersJSONLines runs a tiny peers benchmark on a file store and checks
// that each system printed its line and that the ratio is theirs.
func TestPeersJSONLines(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the peers benchmark builds bench/dbos with the go command, which is not on PATH")
	}
	var out, errb bytes.Buffer
	store := "file://" + t.TempDir()
	code := run([]string{"peers", "--store", store, "--concurrency", "2", "--ops", "8"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := map[string]map[string]any{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if r["bench"] != "peers" || r["concurrency"] != 2.0 {
			t.Fatalf("unexpected line %v", r)
		}
		key, _ := r["system"].(string)
		if ratio, ok := r["ratio"].(string); ok {
			key = "ratio " + ratio
		}
		if _, dup := lines[key]; dup {
			t.Fatalf("two %q lines:\n%s", key, out.String())
		}
		lines[key] = r
	}
	tqw, dbos, ratio := lines["tqw-file"], lines["dbos-sqlite"], lines["ratio tqw-file/dbos-sqlite"]
	if tqw == nil || dbos == nil || ratio == nil || len(lines) != 3 {
		t.Fatalf("want a tqw-file, a dbos-sqlite and a ratio line, got:\n%s", out.String())
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
