package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// peersSteps is the workflow both systems run: ten sequential no-op steps.
const peersSteps = 10

// peersBench compares tqw's runtime with DBOS Transact for Go on SQLite, on
// the same 10-step no-op workflow, in one run on one machine.
var peersBench = struct {
	dbosModule string
	dbosSync   string
	payload    int
}{}

func init() {
	register(&bench{
		name:    "peers",
		summary: "tqw runtime vs DBOS Transact (SQLite) on the same 10-step no-op workflow: steps/s side by side and as ratios",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&peersBench.dbosModule, "dbos-module", "", "folder of the bench/dbos module (default: bench/dbos above the working directory)")
			fs.StringVar(&peersBench.dbosSync, "dbos-synchronous", "FULL", "SQLite synchronous level for DBOS: FULL fsyncs every commit like tqw, NORMAL is DBOS's default")
			fs.IntVar(&peersBench.payload, "payload", 64, "payload bytes tqw carries from step to step")
		},
		run: runPeers,
	})
}

// runPeers measures every concurrency level on every tqw store and on DBOS,
// alternating which system goes first from one level to the next so both
// see the same machine conditions, and prints a ratio line per tqw store.
func runPeers(ctx context.Context, cfg *config) error {
	if peersBench.payload < 0 {
		return errors.New("--payload must be >= 0")
	}
	mod, err := findDBOSModule(peersBench.dbosModule)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "tqw-bench-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "dbos-peer")
	if err := buildDBOS(ctx, mod, bin); err != nil {
		return err
	}
	// The runtime benchmark's workload, with the peers' shape.
	runtimeBench.steps, runtimeBench.payload, runtimeBench.inFlight = peersSteps, peersBench.payload, 0
	dbosDir := dbosDirFor(cfg.stores)

	for i, c := range cfg.concurrency {
		var tqw []map[string]any
		var dbos map[string]any
		measureTQW := func() error {
			for _, u := range cfg.stores {
				r, err := peersTQW(ctx, cfg, u, c)
				if err != nil {
					return err
				}
				tqw = append(tqw, r)
			}
			return nil
		}
		measureDBOS := func() (err error) {
			dbos, err = runDBOS(ctx, cfg, bin, dbosDir, c)
			return err
		}
		order := []func() error{measureTQW, measureDBOS}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, m := range order {
			if err := m(); err != nil {
				return err
			}
		}
		for _, r := range append(tqw, dbos) {
			if err := emitLine(cfg, r); err != nil {
				return err
			}
		}
		for _, r := range tqw {
			ratio := map[string]any{
				"bench":               "peers",
				"ratio":               fmt.Sprintf("%s/%s", r["system"], dbos["system"]),
				"store":               r["store"],
				"concurrency":         c,
				"steps_per_sec_ratio": r["steps_per_sec"].(float64) / dbos["steps_per_sec"].(float64),
			}
			if err := emitLine(cfg, ratio); err != nil {
				return err
			}
		}
	}
	return nil
}

// peersTQW runs the runtime benchmark's workload on store u and returns its
// line in the peers' shape: ops are runs, latency is per run.
func peersTQW(ctx context.Context, cfg *config, u string, c int) (map[string]any, error) {
	inner, err := storeurl.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("bench-peers/%d-%d", c, time.Now().UnixNano())
	r, err := runtimeRuns(ctx, cfg, counting.New(inner), prefix, c)
	if err != nil {
		return nil, fmt.Errorf("tqw on %s at concurrency %d: %w", u, c, err)
	}
	if err := cleanPrefix(ctx, inner, prefix+"/"); err != nil {
		return nil, fmt.Errorf("clean up %s under %s: %w", u, prefix, err)
	}
	runs := r.Extra["runs"].(int64)
	system := "tqw"
	if p, err := url.Parse(u); err == nil && p.Scheme != "" {
		system += "-" + p.Scheme
	}
	perRun := func(perStep float64) float64 { return perStep * peersSteps }
	line := map[string]any{
		"bench": "peers", "system": system, "store": u, "concurrency": c,
		"ops": runs, "seconds": r.Seconds, "ops_per_sec": float64(runs) / r.Seconds,
		"runs_per_sec": float64(runs) / r.Seconds, "steps_per_sec": r.OpsPerSec, "steps_per_run": peersSteps,
		"p50_ms": r.P50Ms, "p99_ms": r.P99Ms,
		"puts_per_op": perRun(r.PutsPerOp), "gets_per_op": perRun(r.GetsPerOp), "lists_per_op": perRun(r.ListsPerOp),
		"puts_per_step": r.PutsPerOp,
		"op_unit":       "run of 10 steps (latency: submit to the last step's ack); requests per op are per run",
	}
	if cpu, ok := r.Extra["cpu_us_per_step"]; ok {
		line["cpu_us_per_step"] = cpu
	}
	return line, nil
}

// runDBOS runs the DBOS peer for one concurrency level and returns its line.
func runDBOS(ctx context.Context, cfg *config, bin, dir string, c int) (map[string]any, error) {
	args := []string{"--concurrency", fmt.Sprint(c), "--synchronous", peersBench.dbosSync, "--dir", dir}
	if cfg.ops > 0 {
		args = append(args, "--ops", fmt.Sprint(cfg.ops))
	} else {
		args = append(args, "--duration", cfg.duration.String())
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("dbos peer %v: %w\n%s", args, err, stderr.Bytes())
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("dbos peer printed %q: %w", sc.Text(), err)
		}
		if m["system"] == "dbos-sqlite" {
			if _, ok := m["steps_per_sec"].(float64); !ok {
				return nil, fmt.Errorf("dbos peer line lacks steps_per_sec: %s", sc.Text())
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("dbos peer %v printed no dbos-sqlite line:\n%s\n%s", args, stdout.Bytes(), stderr.Bytes())
}

// buildDBOS builds the bench/dbos module into bin. On a fresh machine the
// go command downloads DBOS and its dependencies through the module proxy.
func buildDBOS(ctx context.Context, mod, bin string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the peers benchmark builds %s with the go command, which is not on PATH: %w", mod, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the DBOS peer in %s: %w\n%s", mod, err, out)
	}
	return nil
}

// findDBOSModule returns dir, or the bench/dbos folder of the nearest
// enclosing checkout of the working directory.
func findDBOSModule(dir string) (string, error) {
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			return "", fmt.Errorf("--dbos-module %s: %w", dir, err)
		}
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		cand := filepath.Join(d, "bench", "dbos")
		if _, err := os.Stat(filepath.Join(cand, "go.mod")); err == nil {
			return cand, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no bench/dbos/go.mod above %s: run from the tqw checkout or pass --dbos-module", wd)
		}
	}
}

// dbosDirFor puts DBOS's database next to the first file store, so both
// systems fsync on the same filesystem; without a file store it uses the
// temporary folder.
func dbosDirFor(stores []string) string {
	for _, s := range stores {
		if rest, ok := strings.CutPrefix(s, "file://"); ok {
			if abs, err := filepath.Abs(filepath.FromSlash(rest)); err == nil {
				return filepath.Dir(abs)
			}
		}
	}
	return os.TempDir()
}

// emitLine writes m as one JSON line (keys sorted).
func emitLine(cfg *config, m map[string]any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(cfg.out, string(b))
	return err
}
