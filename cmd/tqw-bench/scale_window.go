package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// scaleWindowWorkflow is the windows workload's run: ten steps of the
// scale_noop action, each a step job of its own through the interpreter.
var scaleWindowWorkflow = func() string {
	var b strings.Builder
	b.WriteString("tqw: v1\nname: scale-window\nsteps:\n")
	for i := 1; i <= scaleWindowSteps; i++ {
		fmt.Fprintf(&b, "  - {id: a%d, action: scale_noop, with: {i: %d}}\n", i, i)
	}
	return b.String()
}()

// scaleWindowSteps is the steps of one windows-workload run; its last
// step's id is scaleWindowLast.
const (
	scaleWindowSteps = 10
	scaleWindowLast  = "a10"
)

// scaleNoop is the windows workload's action: it returns its argument.
type scaleNoop struct{}

func (scaleNoop) Name() string { return "scale_noop" }

func (scaleNoop) Execute(_ context.Context, call *actions.Call) (any, error) {
	var args struct {
		I int64 `arg:"i,required"`
	}
	if err := actions.DecodeArgs(call.Args, &args); err != nil {
		return nil, err
	}
	return map[string]any{"i": args.I}, nil
}

// windowPoint is one measured window.
type windowPoint struct {
	window                   int
	runsPerSec, cpuUsPerStep float64
	peakRSSMB, sampledRSSMB  float64
	liveHeapMB, endRSSMB     float64
}

// runScaleWindows runs --windows windows of --window-runs runs of
// scaleWindowWorkflow, --window-concurrency at a time, through the engine
// (sealing on, default retention, as the CLI runs it), and reports each
// window's peak RSS, live heap after it and CPU per step.
func runScaleWindows(ctx context.Context, cfg *config) error {
	if scaleBench.windows < 1 || scaleBench.windowRuns < 1 || scaleBench.windowConc < 1 {
		return errors.New("--windows, --window-runs and --window-concurrency must be at least 1")
	}
	return eachStore(ctx, cfg, func(url string, store objstore.Store) error {
		points, err := measureWindows(ctx, store)
		if err != nil {
			return fmt.Errorf("scale --path windows on %s: %w", url, err)
		}
		for _, p := range points {
			r := Result{Bench: "scale-windows", Concurrency: scaleBench.windowConc, Ops: int64(scaleBench.windowRuns * scaleWindowSteps),
				OpsPerSec: p.runsPerSec * scaleWindowSteps, Extra: map[string]any{
					"window": p.window, "runs": scaleBench.windowRuns, "runs_per_sec": p.runsPerSec, "cpu_us_per_step": p.cpuUsPerStep,
					"peak_rss_mb": p.peakRSSMB, "sampled_peak_rss_mb": p.sampledRSSMB, "live_heap_mb": p.liveHeapMB, "end_rss_mb": p.endRSSMB,
					"cpu_ratio_to_first": p.cpuUsPerStep / points[0].cpuUsPerStep,
					"op_unit":            "step of a run of ten scale_noop action steps"}}
			if err := cfg.emitFor(url, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// measureWindows opens the engine on store and measures the windows.
func measureWindows(ctx context.Context, store objstore.Store) ([]windowPoint, error) {
	var mu sync.Mutex
	waiters := map[string]chan struct{}{}
	e, wfs, err := openScaleEngine(ctx, store, scaleNoop{}, scaleBench.windowConc, func(ev interpreter.Event) {
		if ev.Kind != "end" || ev.Step != scaleWindowLast || ev.Status != interpreter.OutcomeSucceeded {
			return
		}
		mu.Lock()
		ch := waiters[ev.RunID]
		delete(waiters, ev.RunID)
		mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}, scaleWindowWorkflow)
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.Close(context.Background()) }()
	w := wfs[0]
	// run submits one run and waits for its last step to end.
	run := func(id string) error {
		ch := make(chan struct{})
		mu.Lock()
		waiters[id] = ch
		mu.Unlock()
		if _, err := e.Submit(ctx, w, nil, id); err != nil {
			return err
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var points []windowPoint
	for k := range scaleBench.windows {
		p := windowPoint{window: k + 1}
		resetPeakRSS()
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				p.sampledRSSMB = max(p.sampledRSSMB, rssMB())
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		})
		cpu0, t0 := processCPU(), time.Now()
		err := forEachConcurrently(ctx, scaleBench.windowRuns, scaleBench.windowConc, func(_ context.Context, i int) error {
			return run(fmt.Sprintf("win%02d-%06d", k, i))
		})
		secs, cpu := time.Since(t0).Seconds(), processCPU()-cpu0
		close(stop)
		sampler.Wait()
		if err != nil {
			return nil, err
		}
		p.runsPerSec = float64(scaleBench.windowRuns) / secs
		p.cpuUsPerStep = float64(cpu) / 1e3 / float64(scaleBench.windowRuns*scaleWindowSteps)
		p.peakRSSMB = procStatusMB("VmHWM")
		if p.peakRSSMB < p.sampledRSSMB {
			// The kernel did not reset the peak (resetPeakRSS): the
			// process's peak so far is no window's.
			p.peakRSSMB = p.sampledRSSMB
		}
		if err := writeHeapProfile(fmt.Sprintf("window-%d", p.window)); err != nil {
			return nil, err
		}
		goruntime.GC()
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		p.liveHeapMB, p.endRSSMB = float64(ms.HeapAlloc)/(1<<20), rssMB()
		fmt.Fprintf(os.Stderr, "scale: window %d: %.0f runs/s, %.1f µs CPU/step, peak RSS %.0f MB, live heap %.1f MB\n",
			p.window, p.runsPerSec, p.cpuUsPerStep, p.peakRSSMB, p.liveHeapMB)
		points = append(points, p)
	}
	return points, nil
}

// resetPeakRSS resets the kernel's peak RSS of this process (VmHWM) so
// the next reading is one window's; where it cannot, VmHWM stays the
// process's and measureWindows falls back to its samples.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
