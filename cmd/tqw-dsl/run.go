package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	tqwengine "github.com/tqw-dsl/tqw/interpreter/engine"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

func init() { commands = append(commands, newRunCmd) }

type runFlags struct {
	store   string
	input   string
	runID   string
	detach  bool
	json    bool
	noShell bool
	fresh   bool
	// labels are --label's, checked (submitLabels).
	labelFlags []string
	labels     map[string]string
	visits     int
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a workflow file to its end, resuming unfinished runs in the store too",
		Long: `run validates FILE, pins it in the store by content hash, submits a run and
works the store until that run ends, then prints its result. It also works
every other unfinished run in the store, so running it again after a crash
finishes what was interrupted, and applies the commands other processes
send meanwhile (signal, cancel, submit), as a worker does.

When a worker (or another run) already holds the store, run sends the run to
it through the store's inbox and follows it read-only until it ends, with the
same output and exit codes; if that writer stops first, run works the store
itself.

Running the same command again after the process running it died (kill -9,
a crash, a reboot) finishes the interrupted run instead of starting another:
the same workflow files and the same input, with no live process following
that run, resume it ("resuming run ID from step S") and print its result,
also when it ended meanwhile. --new starts a fresh run regardless; --run-id
names the run explicitly.

On a terminal each step is shown as it starts and ends (a step is shown
complete only once it is durable in the store), the run id when it starts,
under a step that waits for a signal the tqw-dsl signal command that sends
it (with a payload shaped by the step's schema), and at the end the run id
with the command that shows its history. --json prints one JSON event per
line instead (run_start, the steps' start and end,
store_unreachable/store_reachable), the last one (run_end) with the run's
status and result. When the store stops answering, run says so and starts
no step until it is back.

Exit codes: 0 succeeded, 1 failed, 3 cancelled, 2 a usage, validation or
input error (nothing is written then), 130 interrupted (the run continues
with 'tqw-dsl worker' or 'tqw-dsl run' again, or in the live writer).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd, args[0], &f)
		},
	}
	addStoreFlag(cmd, &f.store)
	cmd.Flags().StringVar(&f.input, "input", "", "run input: JSON, or @FILE to read it from a file (default {})")
	cmd.Flags().StringVar(&f.runID, "run-id", "", "run id (default: a new ULID); submitting an active run's id with the same input follows it")
	cmd.Flags().BoolVar(&f.detach, "detach", false, "submit the run, print its id and exit without working it (not on a mem:// store, which the run would not outlive)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON event per line")
	cmd.Flags().BoolVar(&f.noShell, "no-shell", false, "refuse workflows that use the shell action, and do not run it")
	cmd.Flags().StringArrayVar(&f.labelFlags, "label", nil, labelFlagHelp)
	addHistoryVisitsFlag(cmd, &f.visits)
	cmd.Flags().BoolVar(&f.fresh, "new", false, "start a new run even if an earlier run of the same workflow and input was interrupted")
	return cmd
}

// startEvent is the first line of run --json.
type startEvent struct {
	Event   string `json:"event"` // "run_start"
	RunID   string `json:"run"`
	Resumed bool   `json:"resumed,omitempty"`
	// FromStep is the step a resumed run continues at.
	FromStep string `json:"from_step,omitempty"`
}

// runStart says how run came to the run it follows.
type runStart uint8

const (
	startNew      runStart = iota // submit it
	startTakeOver                 // submitted; its writer stopped before it ended
	startResume                   // an earlier run of the same command was interrupted
	startResubmit                 // likewise, and the store does not hold its run: submit it again
)

// interrupted is a run an earlier run of the same command submitted and
// did not see end, its process being dead.
type interrupted struct {
	runID string
	from  string // the step it continues at; "" when it ended
	// submit is set when the store has no such run (yet): its
	// submission may wait in the inbox of a writer that died, or never
	// have been sent. Submitting again under the same id (with the same
	// input) is a no-op in the first case.
	submit bool
}

// orphanedRun is a run claimed under a key whose claiming process is
// dead: found is false when the store has no such run.
type orphanedRun struct {
	runID string
	found bool
	state runstate.Status
}

// eachOrphanedRun calls visit with every run claimed under key whose
// claiming process is dead, in claim order, until visit reports done or
// fails. It is the one reading of the claims that both findInterrupted
// and noteEarlierVersion make. Cost: one LIST of the claims, and, when
// one names a dead process, a read-only view of the store.
func eachOrphanedRun(ctx context.Context, url, key string, visit func(store objstore.Store, v *view, r orphanedRun) (done bool, err error)) error {
	store, err := openStore(ctx, url)
	if err != nil {
		return err
	}
	claims, err := interpreter.RunClaims(ctx, store, key)
	if err != nil {
		return failf(exitFailed, "looking for an interrupted run in %s: %v", url, err)
	}
	var v *view
	defer func() {
		if v != nil {
			_ = v.Close()
		}
	}()
	for _, c := range claims {
		if !c.OwnerDead() {
			continue // followed by a live process: a run of its own
		}
		if v == nil {
			if v, err = openView(ctx, url); err != nil {
				return err
			}
		}
		r := orphanedRun{runID: c.RunID, found: true}
		r.state, err = v.insp.Status(ctx, c.RunID)
		if errors.Is(err, runtime.ErrRunNotFound) {
			r.found = false
		} else if err != nil {
			return failf(exitFailed, "status of the interrupted run %s: %v", c.RunID, err)
		}
		if done, err := visit(store, v, r); done || err != nil {
			return err
		}
	}
	return nil
}

// findInterrupted returns the first run submitted under key whose
// following process is dead, or nil. Cost: eachOrphanedRun's.
func findInterrupted(ctx context.Context, url string, w *interpreter.Workflow, key string) (*interrupted, error) {
	var found *interrupted
	err := eachOrphanedRun(ctx, url, key, func(_ objstore.Store, v *view, r orphanedRun) (bool, error) {
		from := w.Main.Steps[0].ID
		switch {
		case !r.found:
			found = &interrupted{runID: r.runID, from: from, submit: true}
			return true, nil
		case r.state.State.Terminal():
			from = ""
		default:
			if recs, err := interpreter.History(ctx, v.records(), nil, r.runID); err == nil && len(recs) > 0 {
				last := recs[len(recs)-1]
				from = last.Step
				if last.Next != "" {
					from = last.Next
				}
			}
		}
		found = &interrupted{runID: r.runID, from: from}
		return true, nil
	})
	return found, err
}

// announce prints the run id when run starts following it: a JSON event,
// or a line on a terminal (always for a resumed run).
func announce(out, errOut io.Writer, runID string, how runStart, from string, asJSON bool) {
	if asJSON {
		_ = json.NewEncoder(out).Encode(startEvent{Event: "run_start", RunID: runID, Resumed: how == startResume || how == startResubmit, FromStep: from})
		return
	}
	switch {
	case how == startResubmit:
		fmt.Fprintf(errOut, "resuming run %s (an earlier run of this command was interrupted; --new starts another)\n", runID)
	case how == startResume && from == "":
		fmt.Fprintf(errOut, "run %s of this command was interrupted and has ended since\n", runID)
	case how == startResume:
		fmt.Fprintf(errOut, "resuming run %s from step %s (an earlier run of this command was interrupted; --new starts another)\n", runID, from)
	case isTerminal(errOut):
		fmt.Fprintf(errOut, "run %s\n", runID)
	}
}

// endEvent is the last line of run --json.
type endEvent struct {
	Event  string          `json:"event"` // "run_end"
	RunID  string          `json:"run"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

func runRun(cmd *cobra.Command, path string, f *runFlags) error {
	if f.detach {
		if err := refuseMem(f.store, "run --detach"); err != nil {
			return err
		}
	}
	input, _, err := readInputArg(f.input)
	if err != nil {
		return err
	}
	if f.labels, err = submitLabels(f.labelFlags); err != nil {
		return err
	}
	if err := checkHistoryVisits(f.visits); err != nil {
		return err
	}
	w, err := loadWorkflow(cmd, path, f.noShell)
	if err != nil {
		return err
	}
	if err := checkInput(w, input); err != nil {
		return err
	}
	runID := f.runID
	if runID == "" {
		runID = ulid.Make().String()
	}
	if err := runstate.ValidateRunID(runID); err != nil {
		return failf(exitUsage, "--run-id: %v", err)
	}
	if err := checkLabels(w, input, runID, f.labels); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	// A run of this command that an earlier process left unfinished is
	// resumed, not started again (only for runs run names itself).
	rc := &rerunClaim{}
	how := startNew
	var from string
	if f.runID == "" && !f.fresh && !f.detach {
		if rc.key, err = interpreter.RunKey(w, input); err != nil {
			return failf(exitUsage, "--input: %v", err)
		}
		prev, err := findInterrupted(context.WithoutCancel(ctx), f.store, w, rc.key)
		if err != nil {
			return err
		}
		if prev != nil {
			runID, how, from = prev.runID, startResume, prev.from
			if prev.submit {
				how = startResubmit
			}
		}
		if rc.fileKey, err = interpreter.FileKey(path, input); err != nil {
			return failf(exitUsage, "--input: %v", err)
		}
		if prev == nil {
			if err := noteEarlierVersion(context.WithoutCancel(ctx), f.store, rc.fileKey, path, storeArg(cmd, f.store), errOut); err != nil {
				return err
			}
		}
	}
	var progress func(interpreter.Event)
	if !f.detach {
		var hints *waitHints
		if !f.json && isTerminal(errOut) {
			hints = &waitHints{url: f.store, storeArg: storeArg(cmd, f.store), errOut: errOut}
			defer hints.end()
		}
		progress = newProgress(runID, out, errOut, f.json, hints)
	}
	for {
		s, err := openSession(context.WithoutCancel(ctx), f.store, engineOptions{noShell: f.noShell, events: progress, name: "run", brief: f.detach, inboxPoll: runInboxPoll, historyVisits: f.visits})
		if err != nil {
			return err
		}
		if err := rc.claim(ctx, s.store, runID); err != nil {
			_ = s.Close()
			return err
		}
		if s.e != nil {
			err = runLocal(ctx, s.e, w, input, runID, f, out, errOut, how, from, rc)
		} else {
			err = runRemote(ctx, s, w, input, runID, f, progress, out, errOut, how, from, rc)
			_ = s.Close()
		}
		if !errors.Is(err, errWriterGone) {
			rc.release(ctx, s.store, runID, err)
			if err == nil && !f.detach && !f.json && isTerminal(errOut) {
				fmt.Fprintf(errOut, "run %s succeeded; its steps: tqw-dsl history %s%s\n", runID, shellQuote(runID), storeArg(cmd, f.store))
			}
			return err
		}
		// The run was submitted (or its submission waits in the inbox);
		// its writer stopped before the run ended: work the store here
		// (without submitting it again).
		how, from = startTakeOver, ""
	}
}

// rerunClaim is run's claim on the run it follows (key empty: none),
// which lets the same command started again resume it.
type rerunClaim struct {
	key      string
	fileKey  string // interpreter.FileKey: finds the run after the file is edited
	claimed  bool
	reported bool // the run's end was printed
}

// reportRun prints the run's end and marks it reported, so the claim goes.
func (rc *rerunClaim) reportRun(out, errOut io.Writer, o *runstate.Outcome, asJSON bool) error {
	rc.reported = true
	return report(out, errOut, o, asJSON)
}

func (rc *rerunClaim) claim(ctx context.Context, store objstore.Store, runID string) error {
	if rc.key == "" || rc.claimed {
		return nil
	}
	for _, key := range []string{rc.key, rc.fileKey} {
		if key == "" {
			continue
		}
		if err := interpreter.ClaimRun(context.WithoutCancel(ctx), store, key, runID, time.Now()); err != nil {
			return failf(exitFailed, "%v", err)
		}
	}
	rc.claimed = true
	return nil
}

// release drops the claim once the run's end was reported, or its
// submission was refused (a usage error: nothing was written). Any other
// failure keeps it: the run may exist (or its submission wait in an
// inbox), and the next attempt of the command finds it.
func (rc *rerunClaim) release(ctx context.Context, store objstore.Store, runID string, err error) {
	if !rc.claimed {
		return
	}
	var ee *exitError
	refused := errors.As(err, &ee) && ee.code == exitUsage
	if !rc.reported && !refused {
		return
	}
	if rerr := interpreter.ReleaseRun(context.WithoutCancel(ctx), store, rc.key, runID); rerr != nil {
		logger(os.Stderr).Warn("deleting the rerun claim failed; the retention sweep removes it", "run", runID, "err", rerr)
	}
	if rc.fileKey != "" {
		if rerr := interpreter.ReleaseRun(context.WithoutCancel(ctx), store, rc.fileKey, runID); rerr != nil {
			logger(os.Stderr).Warn("deleting the rerun claim failed; the next run of the file removes it", "run", runID, "err", rerr)
		}
	}
}

// noteEarlierVersion says, when a run of the file at path on the same
// input was interrupted (its process is dead) and still waits in the
// store, that this run is a new one, and how to resume or cancel the
// interrupted one: the file changed since, so run does not resume it.
// Claims of runs that ended are deleted. Cost: one LIST of the file's
// claims, and, when one names a dead process, a read-only view.
func noteEarlierVersion(ctx context.Context, url, fileKey, path, storeFlag string, errOut io.Writer) error {
	return eachOrphanedRun(ctx, url, fileKey, func(store objstore.Store, _ *view, r orphanedRun) (bool, error) {
		if !r.found || r.state.State.Terminal() {
			_ = interpreter.ReleaseRun(ctx, store, fileKey, r.runID)
			return false, nil
		}
		fmt.Fprintf(errOut, "note: run %s, of an earlier version of %s, was interrupted and is %s in the store; this starts a new run.\n"+
			"  resume it with `tqw-dsl worker%s` (or by running that version again), or cancel it: tqw-dsl cancel %s%s\n",
			r.runID, path, r.state.State, storeFlag, shellQuote(r.runID), storeFlag)
		return false, nil
	})
}

// runInboxPoll is the longest pause between two reads of the inbox while
// run works the store: run is interactive and short-lived, so commands
// sent to it should not wait the worker's 5 s.
const runInboxPoll = time.Second

// runLocal works the store as its writer until runID ends: it submits the
// run (when submit is set), runs the worker and applies other processes'
// commands from the inbox meanwhile.
func runLocal(ctx context.Context, e *engine, w *interpreter.Workflow, input any, runID string, f *runFlags, out, errOut io.Writer,
	how runStart, from string, rc *rerunClaim) error {
	defer e.Close()
	done, unwatch := e.it.Watch(runID)
	defer unwatch()
	if how == startNew || how == startResubmit {
		opts := []interpreter.SubmitOption{interpreter.WithLabels(f.labels)}
		if rc.key != "" {
			opts = append(opts, interpreter.WithRunKey(rc.key))
		}
		sub, err := e.it.Submit(ctx, w, input, runID, opts...)
		if err != nil && how == startResubmit && errors.Is(err, interpreter.ErrRunIDReused) {
			// The interrupted run ended after all (its submission was
			// applied late): report it.
			st, serr := e.rt.Status(ctx, runID)
			if serr == nil && st.State.Terminal() {
				if err := e.Close(); err != nil {
					return err
				}
				return rc.reportRun(out, errOut, tqwengine.OutcomeOf(st), f.json)
			}
		}
		if err != nil {
			return submitError(runID, err)
		}
		if f.detach {
			if err := e.Close(); err != nil {
				return err
			}
			return printSubmitted(out, runID, sub.NewlySubmitted, f.json)
		}
		announce(out, errOut, runID, how, from, f.json)
		if !sub.NewlySubmitted && !f.json && how == startNew {
			fmt.Fprintf(errOut, "run %s is already active; following it\n", runID)
		}
	} else {
		// Resumed, or taken over from a writer that stopped: apply what
		// was left in the inbox (this run's submission, if its writer
		// did not answer it), then look: the run may have ended before
		// it stopped, and no other process can end it now.
		if how == startTakeOver && !f.json {
			fmt.Fprintf(errOut, "the store's writer stopped before run %s ended; working it here\n", runID)
		}
		if how == startResume {
			announce(out, errOut, runID, how, from, f.json)
		}
		if _, err := remote.DrainInbox(ctx, e.rt, remote.InboxOptions{Writer: e.lease.Info().String()}); err != nil {
			return failf(exitFailed, "applying the commands waiting in the inbox of %s: %v", e.url, err)
		}
		st, err := e.rt.Status(ctx, runID)
		if errors.Is(err, runtime.ErrRunNotFound) {
			return failf(exitFailed, "run %s is not in %s: it ended and its result was not retained", runID, e.url)
		}
		if err != nil {
			return failf(exitFailed, "status of run %s: %v", runID, err)
		}
		if st.State.Terminal() {
			if err := e.Close(); err != nil {
				return err
			}
			return rc.reportRun(out, errOut, tqwengine.OutcomeOf(st), f.json)
		}
	}
	sv := e.serve(ctx)
	hctx, stopHealth := context.WithCancel(ctx)
	defer stopHealth()
	healthOut := errOut
	if f.json {
		healthOut = out
	}
	go watchHealth(hctx, e.url, e.q.DB().Health, healthOut, f.json, &sync.Mutex{})
	var outcome *runstate.Outcome
	select {
	case outcome = <-done:
	case <-ctx.Done():
	case <-sv.Stopped():
	}
	stopHealth()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	werr := sv.Shutdown(shutdownCtx)
	if lerr := e.leaseLostError(werr); lerr != nil && outcome == nil {
		_ = e.Close()
		return lerr
	}
	if cerr := e.Close(); cerr != nil {
		return cerr
	}
	if outcome == nil {
		if werr != nil {
			return failf(exitFailed, "working the store stopped: %v", werr)
		}
		return failf(exitInterrupted, "interrupted; run %s continues with 'tqw-dsl worker' or 'tqw-dsl run' again", runID)
	}
	return rc.reportRun(out, errOut, outcome, f.json)
}

// printSubmitted prints the id of a run submitted with --detach.
func printSubmitted(out io.Writer, runID string, isNew, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(out).Encode(map[string]any{"event": "submitted", "run": runID, "new": isNew})
	}
	fmt.Fprintln(out, runID)
	return nil
}

// errWriterGone reports that the live writer a run was sent to stopped
// before the run ended.
var errWriterGone = errors.New("the store's writer stopped")

// runRemote sends the run to the store's live writer (when submit is set)
// and follows it through a read-only view until it ends. It returns
// errWriterGone when the writer stops first.
func runRemote(ctx context.Context, s *session, w *interpreter.Workflow, input any, runID string, f *runFlags,
	progress func(interpreter.Event), out, errOut io.Writer, how runStart, from string, rc *rerunClaim) error {
	v, err := openView(context.WithoutCancel(ctx), s.url)
	if err != nil {
		return err
	}
	defer v.Close()
	if how == startResume {
		announce(out, errOut, runID, how, from, f.json)
	}
	if how == startNew || how == startResubmit {
		sctx, stopWatch := s.watchWriter(ctx)
		opts := []interpreter.SubmitOption{interpreter.WithLabels(f.labels)}
		if rc.key != "" {
			opts = append(opts, interpreter.WithRunKey(rc.key))
		}
		sub, err := submitRemote(sctx, s, v, w, input, runID, opts...)
		gone := errors.Is(context.Cause(sctx), errWriterGone)
		stopWatch()
		if err != nil && how == startResubmit && errors.Is(err, interpreter.ErrRunIDReused) {
			if st, serr := v.insp.Status(ctx, runID); serr == nil && st.State.Terminal() {
				return rc.reportRun(out, errOut, tqwengine.OutcomeOf(st), f.json)
			}
		}
		if err != nil && gone && !f.detach && errors.Is(err, remote.ErrNoAnswer) {
			// The submission waits in the inbox of a writer that
			// stopped: the caller works the store and applies it.
			return errWriterGone
		}
		if err != nil {
			return submitError(runID, err)
		}
		if f.detach {
			return printSubmitted(out, runID, sub.NewlySubmitted, f.json)
		}
		announce(out, errOut, runID, how, from, f.json)
		if !f.json {
			if !sub.NewlySubmitted {
				fmt.Fprintf(errOut, "run %s is already active; following it as %s works it\n", runID, s.holder)
			} else {
				fmt.Fprintf(errOut, "run %s sent to %s; following it\n", runID, s.holder)
			}
		}
	}
	st, err := follow(ctx, s.store, v, runID, progress, followOptions{})
	if err != nil {
		return err
	}
	if st == nil {
		return failf(exitInterrupted, "interrupted; run %s continues in %s", runID, s.holder)
	}
	return rc.reportRun(out, errOut, tqwengine.OutcomeOf(*st), f.json)
}

// followOptions tune follow; the zero value is the CLI's.
type followOptions struct {
	// pollMin and pollMax bound the wait between two reads (defaults
	// 20 ms and 1 s; it doubles while nothing changes).
	pollMin, pollMax time.Duration
	// writerCheck is how often, while nothing changes, follow checks that
	// a live writer still holds the store (default 3 s).
	writerCheck time.Duration
}

// follow reads runID's status and history through v until the run ends,
// passing each new history record to progress as a start and an end
// event. It returns the final status; nil when ctx ended first.
//
// Cost: a Reader Refresh per poll (one GET of the kv manifest plus one
// per WAL object written since), and one lease.Live check (a GET of the
// lease object) per writerCheck.
func follow(ctx context.Context, store objstore.Store, v *view, runID string, progress func(interpreter.Event), o followOptions) (*runstate.Status, error) {
	if o.pollMin == 0 {
		o.pollMin = 20 * time.Millisecond
	}
	if o.pollMax == 0 {
		o.pollMax = time.Second
	}
	if o.writerCheck == 0 {
		o.writerCheck = 3 * time.Second
	}
	// last is the (runtime step, seq) of the last record passed on:
	// the history keeps each step's latest visits only, so its length
	// stops growing in a long loop while new records keep coming.
	delay, last := o.pollMin, [2]int{-1, -1}
	lastCheck, lastState := time.Now(), ""
	for {
		if err := v.r.Refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, failf(exitFailed, "following run %s: %v", runID, err)
		}
		changed := false
		if progress != nil {
			recs, err := interpreter.History(ctx, v.records(), nil, runID)
			if err != nil {
				return nil, failf(exitFailed, "following run %s: %v", runID, err)
			}
			for _, h := range recs {
				if at := [2]int{h.N, h.Seq}; at[0] < last[0] || at[0] == last[0] && at[1] <= last[1] {
					continue
				}
				progress(interpreter.Event{Time: h.StartTime(), RunID: runID, Step: h.Step, Kind: "start", Attempt: h.Attempt})
				progress(interpreter.Event{Time: h.EndTime(), RunID: runID, Step: h.Step, Kind: "end", Attempt: h.Attempt,
					Status: h.Outcome, Elapsed: h.EndTime().Sub(h.StartTime()), Error: h.Error, Next: h.Next})
				last, changed = [2]int{h.N, h.Seq}, true
			}
		}
		st, err := v.insp.Status(ctx, runID)
		if errors.Is(err, runtime.ErrRunNotFound) {
			return nil, failf(exitFailed, "run %s is not in %s any more: it ended and its result was not retained", runID, v.url)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, failf(exitFailed, "following run %s: %v", runID, err)
		}
		if st.State.Terminal() {
			return &st, nil
		}
		if s := fmt.Sprintf("%s/%d/%d", st.State, st.Step, st.Attempt); s != lastState {
			lastState, changed = s, true
		}
		if changed {
			delay, lastCheck = o.pollMin, time.Now()
		} else if time.Since(lastCheck) >= o.writerCheck {
			lastCheck = time.Now()
			if _, live, err := lease.Live(ctx, store, lease.Options{}); err == nil && !live {
				return nil, errWriterGone
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		delay = min(2*delay, o.pollMax)
	}
}

// report prints a run's end and returns its exit status.
func report(out, errOut io.Writer, o *runstate.Outcome, asJSON bool) error {
	if asJSON {
		ev := endEvent{Event: "run_end", RunID: o.RunID, Status: o.Status.String(), Error: o.Error}
		if len(o.Result) > 0 {
			ev.Result = json.RawMessage(o.Result)
		}
		if err := json.NewEncoder(out).Encode(ev); err != nil {
			return failf(exitFailed, "writing output: %v", err)
		}
	}
	switch o.Status {
	case runstate.Succeeded:
		if !asJSON {
			printResult(out, o)
		}
		return nil
	case runstate.Cancelled:
		return failf(exitCancelled, "run %s was cancelled", o.RunID)
	}
	return failf(exitFailed, "run %s failed: %s", o.RunID, o.Error)
}

// printResult prints a JSON string result as text, anything else as JSON.
func printResult(out io.Writer, o *runstate.Outcome) {
	if o.ResultOmitted {
		fmt.Fprintf(out, "(the result is over %d bytes; see 'tqw-dsl history %s')\n", runtime.MaxRetainedResult, o.RunID)
		return
	}
	var s string
	if json.Unmarshal(o.Result, &s) == nil {
		fmt.Fprintln(out, s)
		return
	}
	fmt.Fprintln(out, string(o.Result))
}

// newProgress returns the event printer of run: JSON lines on out, or
// step lines on errOut when it is a terminal, for runID and its children,
// with hints (when not nil) under the steps that wait for a signal.
func newProgress(runID string, out, errOut io.Writer, asJSON bool, hints *waitHints) func(interpreter.Event) {
	var mu sync.Mutex
	if hints != nil {
		hints.mu = &mu
	}
	mine := func(ev interpreter.Event) bool {
		return ev.RunID == runID || strings.HasPrefix(ev.RunID, runID+":")
	}
	if asJSON {
		enc := json.NewEncoder(out)
		return func(ev interpreter.Event) {
			if !mine(ev) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(ev)
		}
	}
	if !isTerminal(errOut) {
		return nil
	}
	return func(ev interpreter.Event) {
		if !mine(ev) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		prefix := ""
		if ev.RunID != runID {
			prefix = "  " + strings.TrimPrefix(ev.RunID, runID+":") + " › "
		}
		switch ev.Kind {
		case "start":
			fmt.Fprintf(errOut, "%s▶ %s (attempt %d)\n", prefix, ev.Step, ev.Attempt)
		default:
			line := fmt.Sprintf("%s%s %s %s in %s", prefix, mark(ev.Status), ev.Step, ev.Status, ev.Elapsed.Round(time.Millisecond))
			if ev.Error != nil {
				line += fmt.Sprintf(": %s: %s", ev.Error.Type, ev.Error.Message)
			}
			if ev.Next != "" && ev.Next != ev.Step {
				line += " → " + ev.Next
			}
			fmt.Fprintln(errOut, line)
			switch {
			case hints == nil:
			case ev.Status == interpreter.OutcomeWaiting:
				hints.waiting(ev.RunID, ev.Step, ev.Attempt)
			case ev.RunID == runID && (ev.Status == interpreter.OutcomeSucceeded || ev.Status == interpreter.OutcomeFailed):
				hints.ended = true // under mu
			}
		}
	}
}

// storeArg is " --store URL" (shell-quoted) when the command was given
// --store, for commands printed to be pasted in the same shell; "" when
// the store came from TQW_STORE or the default, which that shell has too.
func storeArg(cmd *cobra.Command, url string) string {
	if !cmd.Flags().Changed("store") {
		return ""
	}
	return " --store " + shellQuote(url)
}

func mark(status string) string {
	switch status {
	case interpreter.OutcomeOK, interpreter.OutcomeSucceeded:
		return "✓"
	case interpreter.OutcomeWaiting:
		return "…"
	case interpreter.OutcomeRetry, interpreter.OutcomeCaught:
		return "↻"
	}
	return "✗"
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
