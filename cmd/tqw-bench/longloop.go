package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/interpreter/engine"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

var longLoop struct {
	iterations multiFlag // --iterations
	keep       multiFlag // --history-visits
	// child and childKeep run one point in this process (the parent
	// starts one process per point, so each peak RSS is its own).
	child, childKeep int
	childDir         string
}

func init() {
	register(&bench{
		name:    "longloop",
		summary: "a loop of one action and one pure step visited 1k, 10k, 100k times: store size (bytes, objects, KV keys), history records and peak RSS stay bounded by the history window",
		flags: func(fs *flag.FlagSet) {
			listVar(fs, &longLoop.iterations, "iterations", "loop iterations, one process each (default 1000,10000,100000)")
			listVar(fs, &longLoop.keep, "history-visits", "the history window(s) to measure: visits kept per step, -1 every visit (default 100)")
			fs.IntVar(&longLoop.child, "child", 0, "internal: run one point of this many iterations here")
			fs.IntVar(&longLoop.childKeep, "child-keep", 0, "internal: the point's history window")
			fs.StringVar(&longLoop.childDir, "child-dir", "", "internal: the point's store folder")
		},
		run: runLongLoop,
	})
}

// longLoopWorkflow polls (a no-op action) and loops with a pure step, so
// each iteration is one delivery holding two DSL steps.
const longLoopWorkflow = `tqw: v1
name: bench-longloop
input: {type: object, properties: {n: {type: integer}}}
vars: {i: 0}
outputs: {polls: "${ vars.i }"}
steps:
  - id: poll
    action: noop
    set: {i: "${ vars.i + 1 }"}
  - id: again
    switch:
      - when: vars.i < input.n
        next: poll
`

// longLoopPoint is what one point's process reports.
type longLoopPoint struct {
	Iterations    int     `json:"iterations"`
	HistoryVisits int     `json:"history_visits"`
	Seconds       float64 `json:"seconds"`
	PeakRSSMB     float64 `json:"peak_rss_mb"`
	HeapMB        float64 `json:"heap_mb"`
	// HistoryRecords is what interpreter.History returns at the end.
	HistoryRecords int `json:"history_records"`
	DroppedVisits  int `json:"dropped_visits"`
	// KVKeys and KVBytes count every KV entry (keys and values), the
	// runtime's too, when the run ended; HistKeys the run's history keys.
	KVKeys   int   `json:"kv_keys"`
	KVBytes  int64 `json:"kv_bytes"`
	HistKeys int   `json:"hist_keys"`
	// StoreObjects and StoreBytes are the store folder's files once the
	// engine closed (WAL, checkpoints, segments, definitions).
	StoreObjects int   `json:"store_objects"`
	StoreBytes   int64 `json:"store_bytes"`
}

func runLongLoop(ctx context.Context, cfg *config) error {
	if longLoop.child > 0 {
		p, err := longLoopChild(ctx, longLoop.child, longLoop.childKeep, longLoop.childDir)
		if err != nil {
			return err
		}
		return json.NewEncoder(cfg.out).Encode(p)
	}
	iters, err := parsePoints("--iterations", longLoop.iterations, []int{1000, 10_000, 100_000})
	if err != nil {
		return err
	}
	keeps := []int{interpreter.DefaultHistoryVisits}
	if len(longLoop.keep) > 0 {
		keeps = nil
		for _, k := range longLoop.keep {
			n, err := strconv.Atoi(k)
			if err != nil || n == 0 || n < -1 {
				return fmt.Errorf("--history-visits %q: want a positive number, or -1", k)
			}
			keeps = append(keeps, n)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, keep := range keeps {
		for _, n := range iters {
			dir, err := os.MkdirTemp("", "tqw-bench-longloop-")
			if err != nil {
				return err
			}
			cmd := exec.CommandContext(ctx, self, "longloop", "-child", strconv.Itoa(n), "-child-keep", strconv.Itoa(keep), "-child-dir", dir)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err = cmd.Run()
			_ = os.RemoveAll(dir)
			if err != nil {
				return fmt.Errorf("point %d iterations, window %d: %v: %s", n, keep, err, errOut.String())
			}
			var p longLoopPoint
			if err := json.Unmarshal(out.Bytes(), &p); err != nil {
				return fmt.Errorf("point %d iterations: %v: %s", n, err, out.String())
			}
			b, _ := json.Marshal(p)
			extra := map[string]any{}
			_ = json.Unmarshal(b, &extra)
			if err := cfg.emit(Result{Bench: "longloop", Store: "file", Concurrency: 1, Ops: int64(n), Seconds: p.Seconds,
				OpsPerSec: float64(n) / p.Seconds, Extra: extra}); err != nil {
				return err
			}
		}
	}
	return nil
}

// longLoopChild runs the loop n times on a fresh file store in dir with
// the history window keep, and measures it.
func longLoopChild(ctx context.Context, n, keep int, dir string) (longLoopPoint, error) {
	p := longLoopPoint{Iterations: n, HistoryVisits: keep}
	path, cleanup, err := workflowFile("longloop.yaml", longLoopWorkflow)
	if err != nil {
		return p, err
	}
	defer cleanup()
	store, err := storeurl.Open(ctx, "file://"+dir)
	if err != nil {
		return p, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var calls atomic.Int64
	e, err := engine.OpenStore(ctx, store, engine.Options{Actions: []actions.Action{noopAction{calls: &calls}}, Logger: quiet, HistoryVisits: keep})
	if err != nil {
		return p, err
	}
	w, err := e.Load(path)
	if err != nil {
		return p, err
	}
	if err := e.Start(ctx); err != nil {
		return p, err
	}
	start := time.Now()
	if _, err := e.Submit(ctx, w, map[string]any{"n": n}, "loop"); err != nil {
		return p, err
	}
	o, err := e.Await(ctx, "loop")
	if err != nil {
		return p, err
	}
	p.Seconds = time.Since(start).Seconds()
	if o.Status != runstate.Succeeded || string(o.Result) != fmt.Sprintf(`{"polls":%d}`, n) {
		return p, fmt.Errorf("the loop ended %s %s %s", o.Status, o.Result, o.Error)
	}
	recs, err := interpreter.History(ctx, interpreter.WithSealed(e.Runtime().Queue(), e.Runtime().Inspector()), nil, "loop")
	if err != nil {
		return p, err
	}
	p.HistoryRecords = len(recs)
	for _, r := range recs {
		p.DroppedVisits = max(p.DroppedVisits, r.DroppedVisits)
	}
	q := e.Runtime().Queue()
	after := ""
	for {
		page, err := q.KVScan(ctx, "", after, 1000)
		if err != nil {
			return p, err
		}
		for _, kv := range page {
			p.KVKeys++
			p.KVBytes += int64(len(kv.Key) + len(kv.Value))
			if len(kv.Key) > len("tqw/hist/loop/") && kv.Key[:len("tqw/hist/loop/")] == "tqw/hist/loop/" {
				p.HistKeys++
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	p.PeakRSSMB = procStatusMB("VmHWM")
	_, p.HeapMB = liveMemory()
	if err := e.Close(context.WithoutCancel(ctx)); err != nil {
		return p, err
	}
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			p.StoreObjects++
			p.StoreBytes += info.Size()
		}
		return err
	})
	return p, err
}
