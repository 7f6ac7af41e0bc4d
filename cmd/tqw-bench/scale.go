package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	wf "github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// scaleBench measures how the cost of new runs moves as finished runs
// pile up in one store: at each point of --retained it fills the store
// with finished, sealed runs, reopens it (timed), then measures list,
// RSS and runs of --steps no-op steps.
var scaleBench = struct {
	retained multiFlag
	s3Points multiFlag
	steps    int
	runs     int
	fillConc int
	plot     string
	cpuProf  string
	memProf  string
	waiting  int
	repeat   int
	path     string
	seedOnly bool
	sample   int
	replot   string
	// The windows path's: windows, runs per window and runs in flight.
	windows, windowRuns, windowConc int
}{}

func init() {
	register(&bench{
		name:    "scale",
		summary: "steps/s, CPU µs/step, RSS, reopen time and list latency as retained (sealed) runs grow; writes a PNG plot",
		flags: func(fs *flag.FlagSet) {
			listVar(fs, &scaleBench.retained, "retained", "retained finished runs at each point (comma-separated, ascending; default 0,10000,100000)")
			listVar(fs, &scaleBench.s3Points, "s3-retained", "retained runs at each point on s3:// stores (default --retained's)")
			fs.IntVar(&scaleBench.steps, "steps", 10, "steps per measured run")
			fs.IntVar(&scaleBench.runs, "runs", 200, "runs measured at each point, one after another (concurrency 1)")
			fs.IntVar(&scaleBench.fillConc, "fill-concurrency", 32, "runs in flight while filling the store")
			fs.StringVar(&scaleBench.plot, "plot", "scale.png", "PNG plot to write (empty: none)")
			fs.IntVar(&scaleBench.repeat, "repeat", 5, "measurements of --runs runs at each point; steps/s and CPU per step are their medians")
			fs.IntVar(&scaleBench.waiting, "waiting", 10_000, "runs parked on a signal (24 h timeout) before the first point, waiting through all of them")
			fs.StringVar(&scaleBench.cpuProf, "cpuprofile", "", "write CPU profiles of each point's reopen and measured runs to PREFIX-<store>-<retained>-{reopen,apilist,steps}.pprof")
			fs.StringVar(&scaleBench.path, "path", "runtime", "runtime: bare runtime runs with a Go step runner under a prefix of the store; interpreter: YAML workflows through the engine (sealing on, as the CLI runs it) on the whole store, read back through status, history and the HTTP API; windows: --windows windows of --window-runs runs of ten action steps through the engine, reporting each window's peak RSS, live heap and CPU per step (--retained is not used)")
			fs.BoolVar(&scaleBench.seedOnly, "seed-only", false, "--path interpreter: fill the store to the last point and stop; a later invocation on the same store goes on from the runs it holds")
			fs.StringVar(&scaleBench.replot, "replot", "", "measure nothing: draw --plot from the JSON lines an earlier invocation printed (this file), e.g. of one stopped before its last point")
			fs.IntVar(&scaleBench.sample, "sample", 100, "--path interpreter: retained runs read back and checked after each point")
			fs.IntVar(&scaleBench.windows, "windows", 8, "--path windows: measured windows, one after another")
			fs.IntVar(&scaleBench.windowRuns, "window-runs", 1000, "--path windows: runs of ten action steps per window")
			fs.IntVar(&scaleBench.windowConc, "window-concurrency", 8, "--path windows: runs in flight (and engine concurrency)")
			fs.StringVar(&scaleBench.memProf, "memprofile", "", "write a heap profile at each point, after the reopen, to PREFIX-<store>-<retained>.pprof (--path windows: after each window, to PREFIX-window-<n>.pprof)")
		},
		run: runScale,
	})
}

// scalePoint is one measured point.
type scalePoint struct {
	retained                  int
	stepsPerSec, cpuUsPerStep float64
	rssMB, heapMB             float64
	reopenMs, reopenCPUMs     float64
	listMs                    float64
	// The YAML path's: filtered first pages; read latency p50 and p99
	// (ms) by kind (status, history, api); runs read back and checked;
	// fill runs per second and the fill's peak RSS (MB).
	listStateMs, listWorkflowMs, listLabelMs, apiListMs float64
	reads                                               map[string][2]float64
	verified                                            int
	fillRate, fillPeakRSS                               float64
	// writerRSSMB and writerHeapMB are the filling writer's, before the
	// reopen (YAML path).
	writerRSSMB, writerHeapMB float64
}

func runScale(ctx context.Context, cfg *config) error {
	if scaleBench.replot != "" {
		return replotScale(scaleBench.replot, scaleBench.plot)
	}
	if scaleBench.path == "windows" {
		return runScaleWindows(ctx, cfg)
	}
	points, err := parsePoints("--retained", scaleBench.retained, []int{0, 10_000, 100_000})
	if err != nil {
		return err
	}
	s3Points, err := parsePoints("--s3-retained", scaleBench.s3Points, points)
	if err != nil {
		return err
	}
	if scaleBench.steps < 1 || scaleBench.runs < 1 || scaleBench.fillConc < 1 || scaleBench.repeat < 1 {
		return errors.New("--steps, --runs, --repeat and --fill-concurrency must be at least 1")
	}
	switch scaleBench.path {
	case "interpreter":
		if scaleBench.sample < 1 {
			return errors.New("--sample must be at least 1")
		}
		if scaleBench.steps != scaleMeasuredSteps {
			return fmt.Errorf("--steps %d: --path interpreter measures runs of %d steps (its workflow is fixed)", scaleBench.steps, scaleMeasuredSteps)
		}
		return runScaleYAML(ctx, cfg, points, s3Points)
	case "runtime":
		if scaleBench.seedOnly {
			return errors.New("--seed-only needs --path interpreter")
		}
	default:
		return fmt.Errorf("--path %q: want runtime, interpreter or windows", scaleBench.path)
	}
	series := map[string][]scalePoint{}
	var order []string
	err = eachStore(ctx, cfg, func(url string, inner objstore.Store) error {
		points := points
		if strings.HasPrefix(url, "s3://") {
			points = s3Points
		}
		prefix := fmt.Sprintf("bench-scale/%d", time.Now().UnixNano())
		s := &scaleStore{store: counting.New(inner), prefix: prefix, name: storeTag(url)}
		defer s.close()
		for _, n := range points {
			p, err := s.point(ctx, n)
			if err != nil {
				return fmt.Errorf("scale on %s at %d retained runs: %w", url, n, err)
			}
			series[url] = append(series[url], p)
			r := Result{Bench: "scale", Concurrency: 1, Ops: int64(scaleBench.runs * scaleBench.steps * scaleBench.repeat),
				OpsPerSec: p.stepsPerSec, Extra: map[string]any{
					"retained_runs": n, "steps_per_sec": p.stepsPerSec, "cpu_us_per_step": p.cpuUsPerStep,
					"rss_mb": p.rssMB, "heap_mb": p.heapMB, "reopen_ms": p.reopenMs, "reopen_cpu_ms": p.reopenCPUMs, "waiting_runs": scaleBench.waiting, "list_first_page_ms": p.listMs,
					"op_unit": "step of a measured run (runs of --steps no-op steps at concurrency 1; medians of --repeat measurements)"}}
			if err := cfg.emitFor(url, r); err != nil {
				return err
			}
		}
		order = append(order, url)
		s.close()
		return cleanPrefix(ctx, inner, prefix+"/")
	})
	if err != nil {
		return err
	}
	if scaleBench.plot != "" {
		return writeScalePlot(scaleBench.plot, "", order, series, runtimePanels)
	}
	return nil
}

// parsePoints parses a flag's ascending retained-run counts, or returns
// def when the flag is unset.
func parsePoints(name string, f multiFlag, def []int) ([]int, error) {
	if len(f) == 0 {
		return def, nil
	}
	var points []int
	for _, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || (len(points) > 0 && n < points[len(points)-1]) {
			return nil, fmt.Errorf("%s %q: want ascending whole numbers", name, f.String())
		}
		points = append(points, n)
	}
	return points, nil
}

// scaleStore is one store filled point after point.
type scaleStore struct {
	store  *counting.Store
	prefix string
	q      *queue.Queue
	rt     *wf.Runtime
	w      *wf.Worker
	runner *noopSteps
	filled int
	// name tags the store in profile file names.
	name string
	// slots bound the fill's runs in flight (fillInFlight).
	slots chan struct{}
}

// fillInFlight bounds the fill runs submitted and not yet run: the
// submitters stay ahead of the worker without queueing the whole fill
// in memory.
const fillInFlight = 8192

func (s *scaleStore) close() {
	if s.w != nil {
		_ = s.w.Shutdown(context.Background())
		s.w = nil
	}
	if s.q != nil {
		_ = s.q.Close()
		s.q = nil
	}
}

// open opens the queue and runtime with sealing on.
func (s *scaleStore) open(ctx context.Context) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, s.store, queue.Options{Prefix: s.prefix + "/queue", Logger: log,
		DefaultConfig: queue.QueueConfig{LeaseDuration: time.Minute}})
	if err != nil {
		return err
	}
	s.runner = &noopSteps{last: scaleBench.steps - 1, waiters: map[string]chan string{}}
	if s.slots == nil {
		s.slots = make(chan struct{}, fillInFlight)
	}
	rt, err := wf.New(q, s.store, scaleRunner{s.runner, s.slots}, wf.Options{Concurrency: scaleBench.fillConc, Logger: log, MemoPrefix: s.prefix + "/memo", Sealing: &wf.SealOptions{Prefix: s.prefix + "/sealed"}, SweepInterval: 24 * time.Hour})
	if err != nil {
		_ = q.Close()
		return err
	}
	s.q, s.rt, s.w = q, rt, rt.Spawn(ctx)
	return nil
}

func (s *scaleStore) point(ctx context.Context, retained int) (scalePoint, error) {
	p := scalePoint{retained: retained}
	if s.q == nil {
		if err := s.open(ctx); err != nil {
			return p, err
		}
		if err := s.park(ctx, scaleBench.waiting); err != nil {
			return p, err
		}
	}
	if err := s.fill(ctx, retained-s.filled); err != nil {
		return p, err
	}
	s.close()
	stopProf, err := startCPUProfile(fmt.Sprintf("%s-%d-reopen", s.name, retained))
	if err != nil {
		return p, err
	}
	t0, c0 := time.Now(), processCPU()
	if err := s.open(ctx); err != nil {
		stopProf()
		return p, err
	}
	p.reopenMs = float64(time.Since(t0).Microseconds()) / 1e3
	p.reopenCPUMs = float64(processCPU()-c0) / 1e6
	stopProf()
	var lists Latencies
	for range 21 {
		t0 := time.Now()
		if _, err := s.rt.ListRuns(ctx, runstate.ListOptions{Limit: 100}); err != nil {
			return p, err
		}
		lists.Add(time.Since(t0))
	}
	p.listMs = lists.Percentile(50)
	p.rssMB, p.heapMB = liveMemory()
	if err := writeHeapProfile(fmt.Sprintf("%s-%d", s.name, retained)); err != nil {
		return p, err
	}
	p.stepsPerSec, p.cpuUsPerStep, err = timeMeasuredRuns(fmt.Sprintf("%s-%d-steps", s.name, retained), scaleBench.steps, func(r, i int) error {
		return s.measuredRun(ctx, fmt.Sprintf("m%07d-%02d-%05d", retained, r, i))
	})
	if err != nil {
		return p, err
	}
	// The measured runs are retained too: seal them with the rest.
	s.filled += scaleBench.runs * scaleBench.repeat
	_, err = s.rt.Seal(ctx)
	return p, err
}

// median returns the median of xs (not empty); xs is reordered.
func median(xs []float64) float64 {
	sort.Float64s(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// storeTag turns a store URL into a file-name fragment ("file", "s3").
func storeTag(url string) string {
	scheme, _, _ := strings.Cut(url, "://")
	return scheme
}

// startCPUProfile starts the --cpuprofile profile of one phase (see
// cpuProfile); without --cpuprofile it does nothing.
func startCPUProfile(name string) (func(), error) { return cpuProfile(scaleBench.cpuProf, name) }

// writeHeapProfile writes the live heap to --memprofile's
// PREFIX-name.pprof; without --memprofile it does nothing.
func writeHeapProfile(name string) error { return heapProfile(scaleBench.memProf, name) }

// measuredRun submits one run and waits for its last step's job to end.
func (s *scaleStore) measuredRun(ctx context.Context, id string) error {
	ch := make(chan string, 1)
	s.runner.mu.Lock()
	s.runner.waiters[id] = ch
	s.runner.mu.Unlock()
	defer func() {
		s.runner.mu.Lock()
		delete(s.runner.waiters, id)
		s.runner.mu.Unlock()
	}()
	if _, err := s.rt.Submit(ctx, wf.RunSpec{RunID: id, Input: []byte("scale")}); err != nil {
		return err
	}
	select {
	case jobID := <-ch:
		if _, err := s.q.WaitForCompletion(ctx, jobID); err != nil && !errors.Is(err, queue.ErrNotFound) {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fill submits n more runs, fillConc submitters at a time, each ending
// at its first step, waits until every one ended, and seals them.
func (s *scaleStore) fill(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, scaleBench.fillConc)
	base := s.filled
	for range scaleBench.fillConc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				select {
				case s.slots <- struct{}{}:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
				// Ids in submission order, as ULIDs would be.
				if _, err := s.rt.Submit(ctx, wf.RunSpec{RunID: fmt.Sprintf("f%09d", base+int(i)), Input: []byte("fill")}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := s.q.Stats(ctx, s.rt.QueueName())
		if err != nil {
			return err
		}
		if st.Pending+st.Claimed == 0 && st.Scheduled <= int64(scaleBench.waiting) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.filled += n
	_, err := s.rt.Seal(ctx)
	return err
}

// park submits n runs ("w..." ids) that wait on a signal for 24 hours
// and returns once every one waits.
func (s *scaleStore) park(ctx context.Context, n int) error {
	for i := range n {
		if _, err := s.rt.Submit(ctx, wf.RunSpec{RunID: fmt.Sprintf("w%09d", i), Input: []byte("wait")}); err != nil {
			return err
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := s.q.Stats(ctx, s.rt.QueueName())
		if err != nil {
			return err
		}
		if st.Scheduled >= int64(n) {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rssMB returns the process's resident set size in MB (Linux), or -1.
func rssMB() float64 { return procStatusMB("VmRSS") }

// procStatusMB returns the kB field of /proc/self/status (Linux) in MB,
// or -1.
func procStatusMB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return -1
			}
			return kb / 1024
		}
	}
	return -1
}

// scalePanel is one figure of the plot.
type scalePanel struct {
	title string
	y     func(scalePoint) float64
}

// runtimePanels are the runtime path's plot panels.
var runtimePanels = []scalePanel{
	{"steps/s (concurrency 1)", func(p scalePoint) float64 { return p.stepsPerSec }},
	{"CPU µs per step", func(p scalePoint) float64 { return p.cpuUsPerStep }},
	{"RSS (MB)", func(p scalePoint) float64 { return p.rssMB }},
	{"reopen (ms)", func(p scalePoint) float64 { return p.reopenMs }},
	{"list, first page of 100 (ms)", func(p scalePoint) float64 { return p.listMs }},
}

// writeScalePlot draws one panel per figure (titles prefixed with
// titlePrefix), one line per store, against the retained runs.
func writeScalePlot(path, titlePrefix string, stores []string, series map[string][]scalePoint, panels []scalePanel) error {
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = titlePrefix + pn.title
		p.X.Label.Text = "retained runs"
		p.Y.Min = 0
		for j, url := range stores {
			xys := make(plotter.XYs, len(series[url]))
			for k, pt := range series[url] {
				xys[k] = plotter.XY{X: float64(pt.retained), Y: pn.y(pt)}
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", pn.title, err)
			}
			l.Color = plotutil.Color(j)
			pts.Color = plotutil.Color(j)
			p.Add(l, pts)
			p.Legend.Add(url, l)
		}
		p.Legend.Top = true
		grid[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(900), vg.Points(float64(300*rows)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// scaleRunner parks waiting runs (ids "w...") on a signal, ends fill runs
// (ids "f...") at their first step, handing back a fill slot, and runs
// measured ones through noopSteps.
type scaleRunner struct {
	*noopSteps
	slots chan struct{}
}

func (r scaleRunner) RunStep(ctx context.Context, s *wf.Step) (wf.StepOutcome, error) {
	if strings.HasPrefix(s.RunID, "w") {
		return wf.ContinueOnSignal(nil, "sig-"+s.RunID, 24*time.Hour), nil
	}
	if strings.HasPrefix(s.RunID, "f") {
		select {
		case <-r.slots:
		default: // a redelivered step: its slot came back already
		}
		return wf.Succeed(nil), nil
	}
	return r.noopSteps.RunStep(ctx, s)
}

// liveMemory returns the process's RSS and live heap in MB after freed
// memory went back to the OS, so they count what is live, not what the
// last phase left for the collector.
func liveMemory() (rss, heap float64) {
	debug.FreeOSMemory()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return rssMB(), float64(ms.HeapAlloc) / (1 << 20)
}

// timeMeasuredRuns runs scaleBench.repeat rounds of scaleBench.runs runs
// of stepsPerRun steps each, under the phase's CPU profile, and returns
// the medians over the rounds of steps/s and process CPU µs per step.
func timeMeasuredRuns(profile string, stepsPerRun int, run func(round, i int) error) (stepsPerSec, cpuUsPerStep float64, err error) {
	stop, err := startCPUProfile(profile)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	var rates, cpus []float64
	steps := float64(scaleBench.runs * stepsPerRun)
	for r := range scaleBench.repeat {
		cpu0, t := processCPU(), time.Now()
		for i := range scaleBench.runs {
			if err := run(r, i); err != nil {
				return 0, 0, err
			}
		}
		secs, cpu := time.Since(t).Seconds(), processCPU()-cpu0
		rates = append(rates, steps/secs)
		cpus = append(cpus, float64(cpu)/1e3/steps)
	}
	return median(rates), median(cpus), nil
}
