package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/interpreter/engine"
	wf "github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// The YAML path's workflows. Fill runs make a real action output (the
// scale_echo action's) that their result is computed from; waiting runs
// park on a signal for a day; measured runs are 9 set steps and a succeed.
const (
	scaleFillWorkflow = `tqw: v1
name: scale-fill
input: {type: object, required: [n], properties: {n: {type: integer}}}
steps:
  - id: compute
    action: scale_echo
    with: {n: "${ input.n }"}
  - id: done
    succeed: {n: "${ input.n }", doubled: "${ steps.compute.output.doubled }", text: "${ output.text }"}
`
	scaleWaitWorkflow = `tqw: v1
name: scale-wait
steps:
  - id: ask
    action: wait_signal
    with: {timeout: 24h}
  - id: done
    succeed: "${ output }"
`
	scaleMeasuredWorkflow = `tqw: v1
name: scale-measured
vars: {i: 0}
steps:
  - {id: s1, set: {i: "${ vars.i + 1 }"}}
  - {id: s2, set: {i: "${ vars.i + 1 }"}}
  - {id: s3, set: {i: "${ vars.i + 1 }"}}
  - {id: s4, set: {i: "${ vars.i + 1 }"}}
  - {id: s5, set: {i: "${ vars.i + 1 }"}}
  - {id: s6, set: {i: "${ vars.i + 1 }"}}
  - {id: s7, set: {i: "${ vars.i + 1 }"}}
  - {id: s8, set: {i: "${ vars.i + 1 }"}}
  - {id: s9, set: {i: "${ vars.i + 1 }"}}
  - {id: done, succeed: "${ vars.i }"}
`
	// scaleMeasuredSteps is the DSL steps of a measured run.
	scaleMeasuredSteps = 10
	// scaleBatches is how many values the fill runs' "batch" label takes.
	scaleBatches = 10
)

// scaleEcho is the fill runs' action: a deterministic output from its n,
// so a read back can be checked.
type scaleEcho struct{}

func (scaleEcho) Name() string { return "scale_echo" }

func (scaleEcho) Execute(_ context.Context, call *actions.Call) (any, error) {
	var args struct {
		N int64 `arg:"n,required"`
	}
	if err := actions.DecodeArgs(call.Args, &args); err != nil {
		return nil, err
	}
	return scaleEchoOutput(args.N), nil
}

func scaleEchoOutput(n int64) map[string]any {
	return map[string]any{"n": n, "doubled": 2 * n, "text": "item-" + strconv.FormatInt(n, 10)}
}

func fillRunID(i int) string     { return fmt.Sprintf("f%09d", i) }
func waitRunID(i int) string     { return fmt.Sprintf("w%09d", i) }
func measuredRunID(i int) string { return fmt.Sprintf("m%09d", i) }

// yamlScale is one store the YAML path fills point after point, opened
// through the engine as the CLI opens it (sealing on).
type yamlScale struct {
	raw   objstore.Store
	store *counting.Store
	name  string
	e     *engine.Engine
	api   *httptest.Server
	srv   *server.Server
	cl    *client.Client

	fillWF, waitWF, measuredWF *interpreter.Workflow

	// filled and measured count the fill and measured runs stored, ids
	// 0..n-1 of each kind.
	filled, measured int
	// slots bound the fill runs submitted and not yet ended.
	slots chan struct{}
	// ended counts the fill runs whose last step is durable.
	ended atomic.Int64
	// fillRate is the last fill's runs per second, submission to seal;
	// fillPeakRSS its highest RSS (MB), sampled every second.
	fillRate, fillPeakRSS float64
	// verbose receives the progress lines.
	verbose io.Writer
}

func runScaleYAML(ctx context.Context, cfg *config, points, s3Points []int) error {
	series := map[string][]scalePoint{}
	var order []string
	err := eachStore(ctx, cfg, func(url string, inner objstore.Store) error {
		points := points
		if storeTag(url) == "s3" {
			points = s3Points
		}
		s := &yamlScale{raw: inner, store: counting.New(inner), name: "yaml-" + storeTag(url), slots: make(chan struct{}, fillInFlight), verbose: os.Stderr}
		defer s.close()
		if err := s.open(ctx); err != nil {
			return fmt.Errorf("scale --path interpreter on %s: %w", url, err)
		}
		if err := s.resume(ctx); err != nil {
			return err
		}
		if err := s.park(ctx, scaleBench.waiting); err != nil {
			return err
		}
		for _, n := range points {
			if n < s.filled+s.measured {
				fmt.Fprintf(s.verbose, "scale: %s already holds %d runs: point %d skipped\n", url, s.filled+s.measured, n)
				continue
			}
			if scaleBench.seedOnly {
				if err := s.fill(ctx, n-s.filled-s.measured); err != nil {
					return err
				}
				continue
			}
			p, err := s.point(ctx, n)
			if err != nil {
				return fmt.Errorf("scale --path interpreter on %s at %d retained runs: %w", url, n, err)
			}
			series[url] = append(series[url], p)
			r := Result{Bench: "scale-yaml", Concurrency: 1, Ops: int64(scaleBench.runs * scaleMeasuredSteps * scaleBench.repeat),
				OpsPerSec: p.stepsPerSec, Extra: map[string]any{
					"retained_runs": p.retained, "waiting_runs": scaleBench.waiting,
					"steps_per_sec": p.stepsPerSec, "cpu_us_per_step": p.cpuUsPerStep,
					"rss_mb": p.rssMB, "heap_mb": p.heapMB, "reopen_ms": p.reopenMs, "reopen_cpu_ms": p.reopenCPUMs,
					"list_first_page_ms": p.listMs, "list_status_ms": p.listStateMs, "list_workflow_ms": p.listWorkflowMs, "list_label_ms": p.listLabelMs, "api_list_first_page_ms": p.apiListMs,
					"read_status_p50_ms": p.reads["status"][0], "read_status_p99_ms": p.reads["status"][1],
					"read_history_p50_ms": p.reads["history"][0], "read_history_p99_ms": p.reads["history"][1],
					"read_api_p50_ms": p.reads["api"][0], "read_api_p99_ms": p.reads["api"][1],
					"runs_verified": p.verified, "fill_runs_per_sec": p.fillRate, "fill_peak_rss_mb": p.fillPeakRSS, "writer_rss_mb": p.writerRSSMB, "writer_heap_mb": p.writerHeapMB,
					"op_unit": "DSL step of a measured run (9 set steps and a succeed, concurrency 1; medians of --repeat measurements)"}}
			if err := cfg.emitFor(url, r); err != nil {
				return err
			}
		}
		order = append(order, url)
		if err := s.close(); err != nil {
			return err
		}
		// After each store, so a later store's failure keeps the plot of
		// those done.
		if scaleBench.plot != "" && !scaleBench.seedOnly {
			return writeScalePlot(scaleBench.plot, "YAML path, ", order, series, yamlPanels)
		}
		return nil
	})
	return err
}

// open opens the engine (sealing on, as the CLI runs it), loads the
// workflows and serves the HTTP API on loopback.
func (s *yamlScale) open(ctx context.Context) error {
	e, wfs, err := openScaleEngine(ctx, s.store, scaleEcho{}, scaleBench.fillConc, func(ev interpreter.Event) {
		if ev.Kind == "end" && ev.Workflow == "scale-fill" && ev.Status == interpreter.OutcomeSucceeded {
			s.ended.Add(1)
			select {
			case <-s.slots:
			default: // a run of an earlier process
			}
		}
	}, scaleFillWorkflow, scaleWaitWorkflow, scaleMeasuredWorkflow)
	if err != nil {
		return err
	}
	s.e = e
	s.fillWF, s.waitWF, s.measuredWF = wfs[0], wfs[1], wfs[2]
	s.srv, err = server.New(server.Config{Runtime: e.Runtime(), Interpreter: e.Interpreter(), DSL: e.LoadOptions()})
	if err != nil {
		return err
	}
	s.api = httptest.NewServer(s.srv.Handler())
	s.cl = client.New(s.api.URL, client.Options{})
	return nil
}

func (s *yamlScale) close() error {
	if s.api != nil {
		s.api.Close()
		s.srv.Close()
		s.api, s.srv = nil, nil
	}
	if s.e == nil {
		return nil
	}
	err := s.e.Close(context.Background())
	s.e = nil
	return err
}

// resume finds the fill and measured runs an earlier invocation stored
// (--seed-only): their ids are dense from 0, so a binary search of
// Status finds how many there are.
func (s *yamlScale) resume(ctx context.Context) error {
	count := func(id func(int) string) (int, error) {
		var failed error
		n := sortSearch(1<<31-1, func(i int) bool {
			if failed != nil {
				return true
			}
			_, err := s.e.Runtime().Status(ctx, id(i))
			if errors.Is(err, wf.ErrRunNotFound) {
				return true
			}
			failed = err
			return false
		})
		return n, failed
	}
	var err error
	if s.filled, err = count(fillRunID); err != nil {
		return err
	}
	if s.measured, err = count(measuredRunID); err != nil {
		return err
	}
	if s.filled+s.measured > 0 {
		fmt.Fprintf(s.verbose, "scale: the store holds %d fill and %d measured runs already\n", s.filled, s.measured)
	}
	return nil
}

// sortSearch is sort.Search over [0, n) without int overflow concerns.
func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if !f(mid) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// park submits n waiting runs (a submission of one already there is a
// no-op) and returns once every one waits.
func (s *yamlScale) park(ctx context.Context, n int) error {
	if err := forEachConcurrently(ctx, n, scaleBench.fillConc, func(ctx context.Context, i int) error {
		_, err := s.e.Submit(ctx, s.waitWF, nil, waitRunID(i))
		return err
	}); err != nil {
		return err
	}
	return s.until(ctx, func(st, _ queue.Stats) bool { return st.Scheduled >= int64(n) })
}

// until polls the step and notification queues' stats until done holds.
func (s *yamlScale) until(ctx context.Context, done func(steps, notify queue.Stats) bool) error {
	rt := s.e.Runtime()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := rt.Queue().Stats(ctx, rt.QueueName())
		if err != nil {
			return err
		}
		nt, err := rt.Queue().Stats(ctx, rt.NotifyQueueName())
		if err != nil {
			return err
		}
		if done(st, nt) {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settle waits until nothing but the waiting runs is left to run or
// notify, then seals every finished run.
func (s *yamlScale) settle(ctx context.Context) error {
	err := s.until(ctx, func(st, nt queue.Stats) bool {
		return st.Pending+st.Claimed == 0 && st.Scheduled <= int64(scaleBench.waiting) && nt.Pending+nt.Claimed+nt.Scheduled == 0
	})
	if err != nil {
		return err
	}
	for {
		n, err := s.e.Runtime().Seal(ctx)
		if err != nil || n == 0 {
			return err
		}
	}
}

// forEachConcurrently runs fn for 0..n-1, conc at a time, and returns the
// first error; a goroutine that fails takes no further index.
func forEachConcurrently(ctx context.Context, n, conc int, fn func(context.Context, int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// openScaleEngine opens the engine on store as the CLI runs it (sealing
// on, default retention) with act as its one action, conc slots, events
// as its event hook and a discarded log, loads each of sources and
// starts it. The scale paths all open their engine through it.
func openScaleEngine(ctx context.Context, store objstore.Store, act actions.Action, conc int, events func(interpreter.Event), sources ...string) (*engine.Engine, []*interpreter.Workflow, error) {
	e, err := engine.OpenStore(ctx, store, engine.Options{
		Actions: []actions.Action{act}, Concurrency: conc,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Events: events,
	})
	if err != nil {
		return nil, nil, err
	}
	wfs := make([]*interpreter.Workflow, len(sources))
	for i, src := range sources {
		if wfs[i], err = interpreter.LoadSource("scale.yaml", []byte(src), e.LoadOptions()); err != nil {
			break
		}
	}
	if err == nil {
		err = e.Start(ctx)
	}
	if err != nil {
		_ = e.Close(context.Background())
		return nil, nil, err
	}
	return e, wfs, nil
}

// fill submits n more fill runs through the engine (fillConc submitters,
// at most fillInFlight runs not yet ended), waits until they ended and
// seals them. It prints its progress every ten seconds.
func (s *yamlScale) fill(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	base, ended0, t0 := s.filled, s.ended.Load(), time.Now()
	stop := make(chan struct{})
	var progress sync.WaitGroup
	progress.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for k := 1; ; k++ {
			select {
			case <-tick.C:
				rss := rssMB()
				s.fillPeakRSS = max(s.fillPeakRSS, rss)
				if k%10 == 0 {
					done := s.ended.Load() - ended0
					fmt.Fprintf(s.verbose, "scale: filled %d of %d runs (%.0f runs/s), RSS %.0f MB\n", done, n, float64(done)/time.Since(t0).Seconds(), rss)
				}
			case <-stop:
				return
			}
		}
	})
	// The engine seals at its sweep interval (a minute at the default
	// retention), so a minute of a fast fill's finished runs would sit
	// in the KV: seal every two seconds instead, as Seal's doc allows.
	sealErr := make(chan error, 1)
	progress.Go(func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if _, err := s.e.Runtime().Seal(ctx); err != nil && !errors.Is(err, context.Canceled) {
					sealErr <- err
					return
				}
			case <-stop:
				return
			}
		}
	})
	// A fill run's end is handled by its terminal notification (which
	// writes its seal marker), on a queue of its own that can fall
	// behind the steps: the submitters also hold back while more than
	// fillInFlight notifications wait, so finished runs that are not
	// yet sealable stay bounded too.
	var backlog atomic.Bool
	progress.Go(func() {
		rt := s.e.Runtime()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if nt, err := rt.Queue().Stats(ctx, rt.NotifyQueueName()); err == nil {
					backlog.Store(nt.Pending+nt.Claimed+nt.Scheduled > fillInFlight)
				}
			case <-stop:
				return
			}
		}
	})
	err := forEachConcurrently(ctx, n, scaleBench.fillConc, func(ctx context.Context, i int) error {
		for backlog.Load() {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		id := base + i
		_, err := s.e.Submit(ctx, s.fillWF, map[string]any{"n": id}, fillRunID(id),
			interpreter.WithLabels(map[string]string{"batch": strconv.Itoa(id % scaleBatches)}))
		return err
	})
	if err == nil {
		err = s.settle(ctx)
	}
	close(stop)
	progress.Wait()
	select {
	case serr := <-sealErr:
		err = errors.Join(err, fmt.Errorf("seal while filling: %w", serr))
	default:
	}
	if err != nil {
		return err
	}
	s.filled += n
	s.fillRate = float64(n) / time.Since(t0).Seconds()
	fmt.Fprintf(s.verbose, "scale: filled %d runs in %s (%.0f runs/s); %d retained\n", n, time.Since(t0).Round(time.Second), s.fillRate, s.filled+s.measured)
	return nil
}

func (s *yamlScale) point(ctx context.Context, retained int) (scalePoint, error) {
	p := scalePoint{retained: retained}
	s.fillRate, s.fillPeakRSS = 0, 0
	if err := s.fill(ctx, retained-s.filled-s.measured); err != nil {
		return p, err
	}
	p.fillRate, p.fillPeakRSS = s.fillRate, s.fillPeakRSS
	// The writer that filled the store, before it closes: what a
	// long-lived process holds, next to what a reopened one does.
	p.writerRSSMB, p.writerHeapMB = liveMemory()
	if err := writeHeapProfile(fmt.Sprintf("%s-%d-writer", s.name, retained)); err != nil {
		return p, err
	}
	if err := s.close(); err != nil {
		return p, err
	}
	stopProf, err := startCPUProfile(fmt.Sprintf("%s-%d-reopen", s.name, retained))
	if err != nil {
		return p, err
	}
	t1, c0 := time.Now(), processCPU()
	err = s.open(ctx)
	p.reopenMs = float64(time.Since(t1).Microseconds()) / 1e3
	p.reopenCPUMs = float64(processCPU()-c0) / 1e6
	stopProf()
	if err != nil {
		return p, err
	}
	insp := s.e.Runtime().Inspector()
	for _, l := range []struct {
		dst  *float64
		opts runstate.ListOptions
	}{
		{&p.listMs, runstate.ListOptions{Limit: 100}},
		{&p.listStateMs, runstate.ListOptions{Limit: 100, States: []runstate.State{runstate.StateSucceeded}}},
		{&p.listWorkflowMs, runstate.ListOptions{Limit: 100, Labels: map[string]string{interpreter.LabelWorkflow: "scale-fill"}}},
		{&p.listLabelMs, runstate.ListOptions{Limit: 100, Labels: map[string]string{"batch": "3"}}},
	} {
		var lats Latencies
		for range 21 {
			t := time.Now()
			if _, err := insp.ListRuns(ctx, l.opts); err != nil {
				return p, err
			}
			lats.Add(time.Since(t))
		}
		*l.dst = lats.Percentile(50)
	}
	// GET /v1/runs, as `tqw-dsl list` calls it while a server holds the
	// store: fewer calls, as it counts every matching run.
	var apiLists Latencies
	stopProf, err = startCPUProfile(fmt.Sprintf("%s-%d-apilist", s.name, retained))
	if err != nil {
		return p, err
	}
	for range 3 {
		t := time.Now()
		if _, err := s.cl.ListRuns(ctx, client.ListOptions{Limit: 100}); err != nil {
			return p, fmt.Errorf("GET /v1/runs: %w", err)
		}
		apiLists.Add(time.Since(t))
	}
	stopProf()
	p.apiListMs = apiLists.Percentile(50)
	p.rssMB, p.heapMB = liveMemory()
	if err := writeHeapProfile(fmt.Sprintf("%s-%d", s.name, retained)); err != nil {
		return p, err
	}
	p.stepsPerSec, p.cpuUsPerStep, err = timeMeasuredRuns(fmt.Sprintf("%s-%d-steps", s.name, retained), scaleMeasuredSteps, func(_, _ int) error {
		err := s.measuredRun(ctx, measuredRunID(s.measured))
		s.measured++
		return err
	})
	if err != nil {
		return p, err
	}
	if err := s.settle(ctx); err != nil {
		return p, err
	}
	p.reads, p.verified, err = s.verify(ctx, rand.New(rand.NewPCG(uint64(retained), 14)), scaleBench.sample)
	return p, err
}

// measuredRun submits one measured run and waits for its outcome.
func (s *yamlScale) measuredRun(ctx context.Context, id string) error {
	done, unwatch := s.e.Interpreter().Watch(id)
	defer unwatch()
	if _, err := s.e.Submit(ctx, s.measuredWF, nil, id); err != nil {
		return err
	}
	select {
	case o := <-done:
		if o.Status != runstate.Succeeded || string(o.Result) != strconv.Itoa(scaleMeasuredSteps-1) {
			return fmt.Errorf("measured run %s: %s, result %s, error %v", id, o.Status, o.Result, o.Error)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// expectedRun is what the reads of a retained run must return.
type expectedRun struct {
	id       string
	workflow string
	result   string
	// steps and outputs are its history: step ids and, where not nil,
	// the JSON of each step's output.
	steps   []string
	outputs []string
}

func (s *yamlScale) expected(i int) expectedRun {
	if i < s.filled {
		out, _ := json.Marshal(scaleEchoOutput(int64(i)))
		res, _ := json.Marshal(map[string]any{"n": i, "doubled": 2 * i, "text": "item-" + strconv.Itoa(i)})
		return expectedRun{id: fillRunID(i), workflow: "scale-fill", result: string(res),
			steps: []string{"compute", "done"}, outputs: []string{string(out), string(res)}}
	}
	e := expectedRun{id: measuredRunID(i - s.filled), workflow: "scale-measured", result: strconv.Itoa(scaleMeasuredSteps - 1)}
	for k := 1; k < scaleMeasuredSteps; k++ {
		e.steps = append(e.steps, "s"+strconv.Itoa(k))
		e.outputs = append(e.outputs, "")
	}
	e.steps = append(e.steps, "done")
	e.outputs = append(e.outputs, e.result)
	return e
}

// verify reads n random retained runs (and a tenth as many waiting ones)
// through the calls `tqw-dsl status` and `history` make (the runtime's
// Status; interpreter.History over the KV and the sealed segments, large
// outputs read back) and through the HTTP API (GET /v1/runs/{id} and its
// history), checking every field it knows; it returns each kind's read
// latency p50 and p99 in ms.
func (s *yamlScale) verify(ctx context.Context, rng *rand.Rand, n int) (map[string][2]float64, int, error) {
	rt := s.e.Runtime()
	records := interpreter.WithSealed(rt.Queue(), rt.Inspector())
	var lat = map[string]*Latencies{"status": {}, "history": {}, "api": {}}
	total := s.filled + s.measured
	for range n {
		want := s.expected(rng.IntN(total))
		t := time.Now()
		st, err := rt.Status(ctx, want.id)
		lat["status"].Add(time.Since(t))
		if err != nil {
			return nil, 0, fmt.Errorf("verify: status of retained run %s: %w", want.id, err)
		}
		if st.State != runstate.StateSucceeded || string(st.Result) != want.result || st.Headers[interpreter.HeaderWorkflow] != want.workflow {
			return nil, 0, fmt.Errorf("verify: run %s: state %s, result %s, workflow %q; want succeeded, %s, %q", want.id, st.State, st.Result, st.Headers[interpreter.HeaderWorkflow], want.result, want.workflow)
		}
		t = time.Now()
		recs, err := interpreter.History(ctx, records, rt.Store(), want.id)
		lat["history"].Add(time.Since(t))
		if err != nil {
			return nil, 0, fmt.Errorf("verify: history of retained run %s: %w", want.id, err)
		}
		got := make([]historyView, len(recs))
		for k, h := range recs {
			got[k] = historyView{h.Step, h.Outcome, h.Output}
		}
		if err := want.checkHistory(got); err != nil {
			return nil, 0, err
		}
		t = time.Now()
		run, err := s.cl.Run(ctx, want.id)
		if err == nil {
			var hist []client.HistoryRecord
			if hist, err = s.cl.History(ctx, want.id); err == nil {
				lat["api"].Add(time.Since(t))
				got = got[:0]
				for _, h := range hist {
					got = append(got, historyView{h.Step, h.Status, h.Output})
				}
				err = want.checkHistory(got)
			}
		}
		if err != nil {
			return nil, 0, fmt.Errorf("verify: API read of retained run %s: %w", want.id, err)
		}
		var res any
		if run.State != "succeeded" || run.Workflow != want.workflow || json.Unmarshal(run.Result, &res) != nil || jsonOf(res) != want.result {
			return nil, 0, fmt.Errorf("verify: API run %s: state %s, workflow %q, result %s; want succeeded, %q, %s", want.id, run.State, run.Workflow, run.Result, want.workflow, want.result)
		}
	}
	for range max(n/10, 1) {
		id := waitRunID(rng.IntN(max(scaleBench.waiting, 1)))
		if scaleBench.waiting == 0 {
			break
		}
		st, err := rt.Status(ctx, id)
		if err != nil {
			return nil, 0, fmt.Errorf("verify: status of waiting run %s: %w", id, err)
		}
		if st.State != runstate.StateWaiting || st.SignalKey == "" {
			return nil, 0, fmt.Errorf("verify: waiting run %s: state %s, signal key %q; want waiting on a key", id, st.State, st.SignalKey)
		}
	}
	out := map[string][2]float64{}
	for k, l := range lat {
		out[k] = [2]float64{l.Percentile(50), l.Percentile(99)}
	}
	return out, n, nil
}

// historyView is what verify compares of a history record.
type historyView struct {
	step, outcome string
	output        any
}

func (want expectedRun) checkHistory(got []historyView) error {
	if len(got) != len(want.steps) {
		return fmt.Errorf("verify: run %s has %d history records, want %d", want.id, len(got), len(want.steps))
	}
	for k, h := range got {
		outcome := interpreter.OutcomeOK
		if k == len(got)-1 {
			outcome = interpreter.OutcomeSucceeded
		}
		if h.step != want.steps[k] || h.outcome != outcome {
			return fmt.Errorf("verify: run %s record %d: step %s %s, want %s %s", want.id, k, h.step, h.outcome, want.steps[k], outcome)
		}
		if want.outputs[k] != "" && jsonOf(h.output) != want.outputs[k] {
			return fmt.Errorf("verify: run %s step %s output %s, want %s", want.id, h.step, jsonOf(h.output), want.outputs[k])
		}
	}
	return nil
}

// jsonOf is v's JSON with numbers normalized (msgpack and JSON decode
// integers into different Go types) and keys sorted.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	var norm any
	if err := json.Unmarshal(b, &norm); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	b, _ = json.Marshal(norm)
	return string(b)
}

// yamlPanels are the YAML path's plot panels.
var yamlPanels = []scalePanel{
	{"steps/s (10-step YAML runs, concurrency 1)", func(p scalePoint) float64 { return p.stepsPerSec }},
	{"CPU µs per step", func(p scalePoint) float64 { return p.cpuUsPerStep }},
	{"RSS (MB)", func(p scalePoint) float64 { return p.rssMB }},
	{"reopen (ms)", func(p scalePoint) float64 { return p.reopenMs }},
	{"list first page of 100, unfiltered (ms)", func(p scalePoint) float64 { return p.listMs }},
	{"list first page, status succeeded (ms)", func(p scalePoint) float64 { return p.listStateMs }},
	{"list first page, workflow scale-fill (ms)", func(p scalePoint) float64 { return p.listWorkflowMs }},
	{"list first page, label batch=3 (ms)", func(p scalePoint) float64 { return p.listLabelMs }},
	{"GET /v1/runs first page, median of 3 (ms)", func(p scalePoint) float64 { return p.apiListMs }},
	{"read a retained run: status + history, p99 (ms)", func(p scalePoint) float64 { return p.reads["status"][1] + p.reads["history"][1] }},
	{"read a retained run through the API, p99 (ms)", func(p scalePoint) float64 { return p.reads["api"][1] }},
}

// replotScale draws plot from the JSON lines of an earlier scale
// invocation (one line per point, as emitted), one line per store.
func replotScale(lines, plot string) error {
	if plot == "" {
		return errors.New("--replot needs --plot")
	}
	b, err := os.ReadFile(lines)
	if err != nil {
		return err
	}
	series := map[string][]scalePoint{}
	var order []string
	bench := ""
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			Bench, Store string
			Retained     int     `json:"retained_runs"`
			Steps        float64 `json:"steps_per_sec"`
			CPU          float64 `json:"cpu_us_per_step"`
			RSS          float64 `json:"rss_mb"`
			Heap         float64 `json:"heap_mb"`
			Reopen       float64 `json:"reopen_ms"`
			List         float64 `json:"list_first_page_ms"`
			ListState    float64 `json:"list_status_ms"`
			ListWorkflow float64 `json:"list_workflow_ms"`
			ListLabel    float64 `json:"list_label_ms"`
			APIList      float64 `json:"api_list_first_page_ms"`
			StatusP50    float64 `json:"read_status_p50_ms"`
			StatusP99    float64 `json:"read_status_p99_ms"`
			HistP50      float64 `json:"read_history_p50_ms"`
			HistP99      float64 `json:"read_history_p99_ms"`
			APIP50       float64 `json:"read_api_p50_ms"`
			APIP99       float64 `json:"read_api_p99_ms"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("%s:%d: %w", lines, i+1, err)
		}
		if bench != "" && r.Bench != bench {
			return fmt.Errorf("%s:%d: bench %q after %q: one path per plot", lines, i+1, r.Bench, bench)
		}
		bench = r.Bench
		if _, ok := series[r.Store]; !ok {
			order = append(order, r.Store)
		}
		series[r.Store] = append(series[r.Store], scalePoint{retained: r.Retained, stepsPerSec: r.Steps, cpuUsPerStep: r.CPU,
			rssMB: r.RSS, heapMB: r.Heap, reopenMs: r.Reopen, listMs: r.List, listStateMs: r.ListState,
			listWorkflowMs: r.ListWorkflow, listLabelMs: r.ListLabel, apiListMs: r.APIList,
			reads: map[string][2]float64{"status": {r.StatusP50, r.StatusP99}, "history": {r.HistP50, r.HistP99}, "api": {r.APIP50, r.APIP99}}})
	}
	switch bench {
	case "scale":
		return writeScalePlot(plot, "", order, series, runtimePanels)
	case "scale-yaml":
		return writeScalePlot(plot, "YAML path, ", order, series, yamlPanels)
	}
	return fmt.Errorf("%s: no scale results in it", lines)
}
