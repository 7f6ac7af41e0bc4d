package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

func TestScaleYAMLPathReadsBackRetainedRuns(t *testing.T) {
	dir := t.TempDir()
	png := filepath.Join(dir, "scale-yaml.png")
	lines := runLines(t, "scale", "--path", "interpreter", "--store", "file://"+filepath.Join(dir, "store"),
		"--retained", "0,40", "--waiting", "4", "--runs", "3", "--repeat", "1", "--sample", "20",
		"--fill-concurrency", "4", "--plot", png)
	if len(lines) != 2 {
		t.Fatalf("%d results, want one per point (2): %v", len(lines), lines)
	}
	for i, want := range []float64{0, 40} {
		r := lines[i]
		if r["bench"] != "scale-yaml" || r["retained_runs"] != want || r["runs_verified"] != float64(20) {
			t.Fatalf("point %d: %v", i, r)
		}
		if r["steps_per_sec"].(float64) <= 0 || r["rss_mb"].(float64) <= 0 || r["read_history_p99_ms"].(float64) <= 0 {
			t.Fatalf("point %d measured nothing: %v", i, r)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Fatalf("plot %s: %v", png, err)
	}
	// The same plot again from the lines alone.
	saved := filepath.Join(dir, "lines.json")
	var b []byte
	for _, r := range lines {
		j, _ := json.Marshal(r)
		b = append(append(b, j...), '\n')
	}
	if err := os.WriteFile(saved, b, 0o600); err != nil {
		t.Fatal(err)
	}
	replotted := filepath.Join(dir, "replot.png")
	if out := runLines(t, "scale", "--replot", saved, "--plot", replotted); len(out) != 0 {
		t.Fatalf("--replot measured: %v", out)
	}
	if st, err := os.Stat(replotted); err != nil || st.Size() == 0 {
		t.Fatalf("replot %s: %v", replotted, err)
	}
}

func TestScaleYAMLVerifyFailsOnAMissingRun(t *testing.T) {
	saved := scaleBench
	t.Cleanup(func() { scaleBench = saved })
	scaleBench.fillConc, scaleBench.waiting = 4, 0
	ctx := context.Background()
	store, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := &yamlScale{raw: store, store: counting.New(store), slots: make(chan struct{}, fillInFlight), verbose: &strings.Builder{}}
	t.Cleanup(func() { _ = s.close() })
	if err := s.open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.fill(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if _, n, err := s.verify(ctx, rand.New(rand.NewPCG(1, 2)), 30); err != nil || n != 30 {
		t.Fatalf("verify of 6 stored runs: %d checked, %v", n, err)
	}
	// Claim three runs more than were stored: a read must miss one.
	s.filled += 3
	_, _, err = s.verify(ctx, rand.New(rand.NewPCG(1, 2)), 30)
	if err == nil || !strings.Contains(err.Error(), "status of retained run f00000000") {
		t.Fatalf("verify with 3 runs missing: %v, want a missing status", err)
	}
}
