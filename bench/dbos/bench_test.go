package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestWorkflowRunsAllStepsDurably runs a few workflows and checks, from the
// system database, that each checkpointed its ten steps in order with their
// values, and that the pool runs WAL with the requested synchronous level.
func TestWorkflowRunsAllStepsDurably(t *testing.T) {
	for _, sync := range []string{syncFull, syncNormal} {
		t.Run(sync, func(t *testing.T) {
			ctx := t.Context()
			p, err := newPeer(ctx, t.TempDir(), sqliteOptions{Synchronous: sync}, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := p.close(); err != nil {
					t.Error(err)
				}
			})

			const runs = 3
			ids := make([]string, 0, runs)
			for i := range runs {
				id, err := p.runOne(i)
				if err != nil {
					t.Fatalf("run %d: %v", i, err)
				}
				ids = append(ids, id)
			}
			if got := p.steps.Load(); got != runs*stepsPerRun {
				t.Errorf("step functions ran %d times, want %d", got, runs*stepsPerRun)
			}
			for _, id := range ids {
				steps, err := dbos.GetWorkflowSteps(p.ctx, id)
				if err != nil {
					t.Fatalf("GetWorkflowSteps(%s): %v", id, err)
				}
				if len(steps) != stepsPerRun {
					t.Fatalf("workflow %s checkpointed %d steps, want %d", id, len(steps), stepsPerRun)
				}
				for i, s := range steps {
					if s.StepName != stepNames[i] || s.Error != nil || fmt.Sprint(s.Output) != fmt.Sprint(i+1) {
						t.Errorf("workflow %s step %d = {name %q, output %v, err %v}, want {name %q, output %d, err nil}",
							id, i, s.StepName, s.Output, s.Error, stepNames[i], i+1)
					}
				}
			}

			got, err := checkSQLiteSettings(ctx, p.db)
			if err != nil {
				t.Fatal(err)
			}
			if want := (sqliteSettings{Synchronous: sync, JournalMode: "wal"}); got != want {
				t.Errorf("sqlite settings = %+v, want %+v", got, want)
			}
		})
	}
}

// TestRunLevelCountsRuns checks --ops is exact under concurrency and that
// latencies are recorded per run.
func TestRunLevelCountsRuns(t *testing.T) {
	p, err := newPeer(t.Context(), t.TempDir(), sqliteOptions{Synchronous: syncFull}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.close(); err != nil {
			t.Error(err)
		}
	})
	lr, err := p.runLevel(t.Context(), 4, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Runs != 9 || lr.Latencies.len() != 9 {
		t.Errorf("runs = %d with %d latencies, want 9 and 9", lr.Runs, lr.Latencies.len())
	}
	if p50, p99 := lr.Latencies.percentile(50), lr.Latencies.percentile(99); p50 <= 0 || p99 < p50 {
		t.Errorf("p50 = %v ms, p99 = %v ms: want 0 < p50 <= p99", p50, p99)
	}
}

// TestRunPrintsOneLinePerLevelAndCleansUp runs the command end to end and
// checks its JSON lines and that the temporary directory is removed.
func TestRunPrintsOneLinePerLevelAndCleansUp(t *testing.T) {
	parent := t.TempDir()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--ops", "4", "--warmup", "1", "--concurrency", "1,2", "--dir", parent}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), out.String())
	}
	for i, line := range lines {
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		wantC := i + 1
		if r.Bench != "peers" || r.System != "dbos-sqlite" || r.Concurrency != wantC || r.Ops != 4 ||
			r.Synchronous != syncFull || r.JournalMode != "wal" || r.StepsPerRun != stepsPerRun {
			t.Errorf("line %d = %+v, want peers/dbos-sqlite, concurrency %d, 4 ops, FULL, wal, 10 steps", i, r, wantC)
		}
		if r.Seconds <= 0 || r.RunsPerSec != r.OpsPerSec || r.StepsPerSec != r.RunsPerSec*stepsPerRun {
			t.Errorf("line %d rates inconsistent: %+v", i, r)
		}
		if r.DBOSVersion == "" {
			t.Errorf("line %d has no dbos_version", i)
		}
	}
	left, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("temporary files left in %s: %v", parent, left)
	}
}

func TestParseFlagsRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--synchronous", "OFF"},
		{"--concurrency", "0"},
		{"--concurrency", "x"},
		{"--ops", "-1"},
		{"--duration", "0s"},
		{"--warmup", "-2"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
	o, err := parseFlags([]string{"--synchronous", "normal", "--concurrency", "1,32", "--concurrency", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.synchronous != syncNormal || fmt.Sprint([]int(o.concurrency)) != "[1 32 4]" {
		t.Errorf("parsed %+v, want NORMAL and [1 32 4]", o)
	}
}
