package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/server/metrics"
)

func init() { commands = append(commands, newWorkerCmd) }

func newWorkerCmd() *cobra.Command {
	var (
		store       string
		noShell     bool
		concurrency int
		idleExit    bool
		inboxPoll   time.Duration
		retention   time.Duration
		visits      int
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Work every run in the store, and apply other processes' commands, until SIGINT or SIGTERM",
		Long: `worker takes the store's writer lease (a lock on file:// stores, a renewed
lease object elsewhere) and runs the steps of every run in it: new ones, ones
interrupted by a crash, retries and waits that come due. While it runs, the
commands of other processes (submit, signal, cancel, run) reach it through
the store's inbox and it applies each exactly once; status, list and history
read the store without disturbing it. A second worker on the same store is
refused (exit 1) instead of fencing this one.

A worker that died on this machine (its pid is gone) is replaced at once. On
stores without a file lock (s3://), one that stopped renewing its lease (a
paused process, or another machine that lost the store) is replaced once this
worker has seen its lease unchanged for the lease's TTL (15s; the environment
variable TQW_LEASE_TTL changes it), with a countdown. A worker that cannot
renew its lease for that long starts no step and applies no command until it
can; one whose lease another process took over exits 1 ("lease lost").

On SIGINT or SIGTERM it stops taking steps and commands, lets running steps
finish (up to 30s, then cancels them; they run again later), makes everything
durable, releases the lease and exits 0.

A run that ended is kept for --retention (default 24h): its status and result
(status, list, run following it), its history and step outputs. After that
the worker deletes them, and its id can be used again; until then submitting
that id is refused. run, while it works the store itself, keeps the
default; the retention of a run is judged by whichever writer runs then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWorkerFlags(concurrency, inboxPoll, retention); err != nil {
				return err
			}
			if err := checkHistoryVisits(visits); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			eo := engineOptions{noShell: noShell, concurrency: concurrency, name: "worker", inboxPoll: inboxPoll, retention: retention, historyVisits: visits}
			var m *metrics.Metrics
			if metricsAddr != "" {
				m = metrics.New()
				eo.wrapStore, eo.events, eo.inboxAnswered, eo.ended = m.WrapStore, m.Events, m.InboxAnswered, m.RunEnded
			}
			e, err := openEngine(context.WithoutCancel(ctx), store, eo)
			var busy *busyError
			if errors.As(err, &busy) {
				return failf(exitFailed, "%v; a second worker would fence it: send it commands (submit, signal, cancel, run) or stop it first", busy)
			}
			if err != nil {
				return err
			}
			defer e.Close()
			if m != nil {
				stopMetrics, err := serveMetrics(cmd.ErrOrStderr(), metricsAddr, m, e)
				if err != nil {
					return err
				}
				defer stopMetrics()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "tqw-dsl worker: working %s (stop with Ctrl-C)\n", store)
			if idleExit {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				go exitWhenIdle(ctx, e, cancel)
			}
			sv := e.serve(ctx)
			select {
			case <-ctx.Done():
			case <-sv.Stopped():
			}
			shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			werr := sv.Shutdown(shutdownCtx)
			if lerr := e.leaseLostError(werr); lerr != nil {
				_ = e.Close()
				return lerr
			}
			if cerr := e.Close(); cerr != nil {
				return cerr
			}
			if werr != nil {
				return failf(exitFailed, "worker stopped: %v", werr)
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "tqw-dsl worker: stopped; every finished step is durable")
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&noShell, "no-shell", false, "do not run the shell action (steps using it fail)")
	cmd.Flags().IntVar(&concurrency, "concurrency", 8, "steps run at once")
	cmd.Flags().DurationVar(&inboxPoll, "inbox-poll", 5*time.Second, "longest pause between two LISTs of the inbox when no command came (an idle worker LISTs it once per pause, 17,280 LISTs a day at 5s); commands from tqw-dsl arrive sooner: on file:// the worker is notified at once, elsewhere it HEADs the inbox doorbell every 500ms")
	cmd.Flags().DurationVar(&retention, "retention", runtime.DefaultResultRetention, "how long a finished run's status, result, history and outputs are kept before the worker deletes them")
	addHistoryVisitsFlag(cmd, &visits)
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464); nothing else is served there")
	cmd.Flags().BoolVar(&idleExit, "idle-exit", false, "stop once no step is runnable or running, none is due within a second and no command waits in the inbox (runs that wait or sleep longer stay in the store)")
	return cmd
}

// serveMetrics serves m at http://addr/metrics until the returned stop is
// called, reading the gauges from e.
func serveMetrics(errOut io.Writer, addr string, m *metrics.Metrics, e *engine) (stop func(), err error) {
	if err := m.Watch(metrics.Source{Runtime: e.rt, Lease: e.lease}); err != nil {
		return nil, failf(exitFailed, "--metrics: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, failf(exitUsage, "--metrics %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Warn("the metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	fmt.Fprintf(errOut, "tqw-dsl worker: metrics at http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// serving is the writer's work in this process: the runtime's worker, the
// inbox server, which applies the commands of other processes, and the
// interpreter's retention sweep.
type serving struct {
	e         *engine
	inboxOpts remote.InboxOptions
	worker    *runtime.Worker
	stopInbox context.CancelFunc
	inboxDone chan struct{}
	stopSweep context.CancelFunc
	sweepDone chan struct{}
	// stopped is closed when the worker returned, the inbox server failed
	// or the writer lease was lost; err says why, for the last two.
	stopped  chan struct{}
	stopOnce sync.Once
	err      error
	// quit ends the lease watcher, once.
	quit     chan struct{}
	quitOnce sync.Once
}

// serve starts the worker, the inbox server and the retention sweep.
// Stop them with Shutdown.
func (e *engine) serve(ctx context.Context) *serving {
	base := context.WithoutCancel(ctx)
	ictx, stopInbox := context.WithCancel(base)
	sctx, stopSweep := context.WithCancel(base)
	s := &serving{e: e, inboxOpts: remote.InboxOptions{Writer: e.lease.Info().String(), MaxInterval: e.inboxPoll, OnAnswered: e.inboxAnswered},
		worker: e.rt.Spawn(base), stopInbox: stopInbox, inboxDone: make(chan struct{}),
		stopSweep: stopSweep, sweepDone: make(chan struct{}),
		stopped: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(s.sweepDone)
		e.it.SweepLoop(sctx)
	}()
	go func() {
		defer close(s.inboxDone)
		err := remote.ServeInbox(ictx, e.rt, s.inboxOpts)
		if err != nil {
			s.stop(fmt.Errorf("applying other processes' commands: %w", err))
		}
	}()
	go func() {
		select {
		case <-s.worker.Done():
			s.stop(nil)
		case <-e.lease.Lost():
			// Another process took the store over; the kv fences this
			// one at its next commit, so stop before trying.
			s.stop(e.lease.Err())
		case <-s.quit:
		}
	}()
	return s
}

func (s *serving) stop(err error) {
	s.stopOnce.Do(func() {
		s.err = err
		close(s.stopped)
	})
}

// Stopped is closed when the work stopped by itself: the worker returned
// (the store failed), the inbox server failed or the lease was lost.
func (s *serving) Stopped() <-chan struct{} { return s.stopped }

// Shutdown stops taking commands and steps, lets running steps finish
// (see runtime.Options.ShutdownTimeout), answers the commands waiting in the
// inbox and returns why the work stopped, nil for a clean stop. Call it
// once the caller is done waiting; it is safe to call again.
func (s *serving) Shutdown(ctx context.Context) error {
	s.stopInbox()
	s.stopSweep()
	werr := s.worker.Shutdown(ctx)
	select {
	case <-s.sweepDone:
	case <-ctx.Done():
	}
	select {
	case <-s.inboxDone:
	case <-ctx.Done():
		if werr == nil {
			werr = fmt.Errorf("stopping the inbox server: %w", ctx.Err())
		}
	}
	s.stop(nil)
	if s.err == nil && werr == nil {
		// Stopping the server may have interrupted a command between
		// its effects and its answer (a signal that ended the very run
		// run was waiting for): one last pass answers it, without
		// applying it twice, and applies the commands that came in
		// meanwhile, so no client is left waiting.
		if _, err := remote.DrainInbox(ctx, s.e.rt, s.inboxOpts); err != nil {
			s.e.log.Warn("answering the commands left in the inbox failed; the next writer answers them", "err", err)
		}
	}
	s.quitOnce.Do(func() { close(s.quit) })
	if s.err != nil {
		return s.err
	}
	return werr
}

// idleHorizon is how soon a scheduled step must be due for --idle-exit to
// wait for it.
const idleHorizon = time.Second

// exitWhenIdle calls stop once the store has been idle for two checks in a
// row: no step or notification pending or claimed, none due soon.
func exitWhenIdle(ctx context.Context, e *engine, stop context.CancelFunc) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	quiet := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e.idle(ctx) {
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= 2 {
			stop()
			return
		}
	}
}

// idle reports whether no step can run now or within idleHorizon and no
// command waits in the inbox.
func (e *engine) idle(ctx context.Context) bool {
	if waiting, err := remote.InboxWaiting(ctx, e.rt, remote.InboxOptions{}); err != nil || waiting {
		return false
	}
	soon := e.q.Clock().Now().Add(idleHorizon)
	for _, name := range []string{e.rt.QueueName(), e.rt.NotifyQueueName()} {
		st, err := e.q.Stats(ctx, name)
		if err != nil || st.Pending > 0 || st.Claimed > 0 {
			return false
		}
		after := ""
		for {
			jobs, err := e.q.ListJobs(ctx, name, storage.StateScheduled, after, 256)
			if err != nil {
				return false
			}
			for _, j := range jobs {
				if j.RunAt.Before(soon) {
					return false
				}
			}
			if len(jobs) < 256 {
				break
			}
			after = jobs[len(jobs)-1].ID
		}
	}
	return true
}

// checkWorkerFlags refuses the worker flags that serve shares with worker
// when they are out of range.
func checkWorkerFlags(concurrency int, inboxPoll, retention time.Duration) error {
	if concurrency < 1 {
		return failf(exitUsage, "--concurrency %d: want at least 1", concurrency)
	}
	if inboxPoll < 200*time.Millisecond {
		return failf(exitUsage, "--inbox-poll %v: want at least 200ms", inboxPoll)
	}
	if retention < time.Second {
		return failf(exitUsage, "--retention %v: want at least 1s", retention)
	}
	return nil
}
