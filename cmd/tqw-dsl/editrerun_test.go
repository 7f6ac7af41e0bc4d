package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// After kill -9, editing the file and running the same command starts a
// new run, and says so: it names the interrupted run of the old version
// and how to resume or cancel it.
func TestRunAfterAnEditNamesTheInterruptedRun(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	src, err := os.ReadFile(testdata + "e2e_wait.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(c.dir, "wait.tqw.yaml")
	if err := os.WriteFile(wf, src, 0o644); err != nil {
		t.Fatal(err)
	}
	first := c.start("run", wf)
	// The run's id: the one run in the store once it waits.
	var runID string
	deadline := time.Now().Add(waitDeadline)
	for runID == "" && time.Now().Before(deadline) {
		if code, out, _ := c.run("list"); code == exitOK {
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 1 && strings.Contains(l, "waiting") {
					runID = f[0]
				}
			}
		}
	}
	if runID == "" {
		t.Fatalf("the first run never waited:\n%s", first.stderr())
	}
	first.kill9()
	edited := strings.Replace(string(src), "succeed: approved", "succeed: approved-v2", 1)
	if err := os.WriteFile(wf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	second := c.start("run", wf)
	second.waitLine("tqw-dsl cancel " + runID)
	for _, want := range []string{"note: run " + runID, "earlier version", "tqw-dsl worker"} {
		if !strings.Contains(second.stderr(), want) {
			t.Errorf("the second run's stderr lacks %q:\n%s", want, second.stderr())
		}
	}
	second.kill9()
}
