package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/dslgen"
)

// dslSteps is the size of the generated workflow (--steps).
var dslSteps int

func init() {
	register(&bench{
		name:    "dsl",
		summary: "load and validate a generated workflow (default 1,000 steps; target <= 50 ms per load, wall p50 and CPU)",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&dslSteps, "steps", 1000, "steps in the generated workflow")
		},
		run: runDSL,
	})
}

// runDSL parses the same generated workflow repeatedly. It touches no
// store: --store only labels the results, so it defaults to "none".
func runDSL(ctx context.Context, cfg *config) error {
	if dslSteps < 1 {
		return fmt.Errorf("--steps %d: want at least 1", dslSteps)
	}
	src := dslgen.Workflow(dslSteps)
	if _, diags, err := dsl.Parse("generated.yaml", src); err != nil {
		return fmt.Errorf("generated workflow is invalid: %w\n%s", err, diags)
	}
	for _, c := range cfg.concurrency {
		// CPU time and allocation per load, next to wall time: other
		// processes on a shared machine inflate wall time, not these.
		runtime.GC()
		var mem0, mem1 runtime.MemStats
		runtime.ReadMemStats(&mem0)
		cpu0 := processCPU()
		m, err := measure(ctx, cfg, c, nil, nil, timed(func(context.Context, int, int64) error {
			_, _, err := dsl.Parse("generated.yaml", src)
			return err
		}))
		cpu1 := processCPU()
		runtime.ReadMemStats(&mem1)
		if err != nil {
			return err
		}
		all := &m.lats
		// The fastest load approximates the cost on an idle machine when
		// other processes share the cores.
		best := all.Percentile(100)
		for _, d := range all.d {
			best = min(best, float64(d)/float64(time.Millisecond))
		}
		n := m.ops
		p50 := all.Percentile(50)
		extra := map[string]any{"steps": dslSteps, "bytes": len(src), "min_ms": best,
			"target_p50_ms": 50, "target_met": p50 <= 50, "gomaxprocs": runtime.GOMAXPROCS(0)}
		// The machine's load average: a large load parses on every core,
		// so its wall time depends on what else runs.
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				extra["loadavg_1m"] = f[0]
			}
		}
		if n > 0 {
			extra["alloc_mb_per_op"] = float64(mem1.TotalAlloc-mem0.TotalAlloc) / 1e6 / float64(n)
			if cpu0 >= 0 && cpu1 >= 0 {
				cpuMs := float64(cpu1-cpu0) / 1e6 / float64(n)
				extra["cpu_ms_per_op"] = cpuMs
				extra["target_cpu_ms"] = 50
				extra["cpu_target_met"] = cpuMs <= 50
			}
		}
		r := m.result("dsl", c, n, extra)
		r.Store = "none"
		if err := cfg.emit(r); err != nil {
			return err
		}
	}
	return nil
}
