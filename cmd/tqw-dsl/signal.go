package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
	"github.com/tqw-dsl/tqw/server/client"
)

func init() { commands = append(commands, newSignalCmd) }

func newSignalCmd() *cobra.Command {
	var (
		store, requestID string
		filter           runFilter
		requireWaiting   bool
		asJSON, yes      bool
	)
	cmd := &cobra.Command{
		Use:   "signal KEY [JSON|@FILE] | signal [FILTERS] [JSON|@FILE] [--yes]",
		Short: "Send a signal (a JSON payload, default null) to the run waiting on KEY",
		Long: `signal delivers a JSON payload to the wait_signal step waiting on KEY (by
default "<run id>:<step id>"), or buffers it for the next step that waits on
KEY.

The payload is checked first against the schema (with.schema) of the step
that will receive it, when that step is known: one waiting on KEY now, or
one the run has not reached yet whose key and schema depend only on the
run and its input (key: "approve:${ run.id }"). A malformed or non-matching
payload is refused with exit code 2, naming the field, and nothing is
written. The worker checks again when the command reaches it. A payload
that still reaches a step that cannot use it (it was buffered before the
run was submitted) is set aside by the step, shown by 'tqw-dsl status' and
'tqw-dsl history', and the run waits on: a bad signal never fails a run.

When no run waits on KEY the signal is buffered: signal says so on stderr,
with how long it stays (` + retentionText + ` by default; 'tqw-dsl signals' lists
what is buffered). --require-waiting refuses instead, with exit code 1,
writing nothing.

When a worker (or run) holds the store, the signal is sent to it through the
store's inbox, which applies it exactly once, and signal waits for its
answer (up to 2m; without one it exits 1 and the signal stays in the inbox
until a writer applies it). Otherwise signal opens the store as its writer
for the moment it takes.

--json prints one line: {"key": KEY, "outcome": "delivered"} or, when
buffered, {"key": KEY, "outcome": "buffered", "expires": TIME}.

Exit codes: 0 delivered or buffered; 2 a usage error or a payload the
receiving step refuses (nothing written); 1 no run waits on KEY with
--require-waiting (nothing written), or the store failed, or the live
writer did not answer.

Bulk: with list's filters instead of KEY, the payload goes to each selected
run that waits on a signal, under the key it waits on (a run that waits on
none is skipped); --require-waiting does not apply.` + bulkHelp,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if filter.given() {
				if len(args) > 1 {
					return failf(exitUsage, "with filters, signal takes only the payload (JSON or @FILE), not a KEY")
				}
				arg := ""
				if len(args) == 1 {
					arg = args[0]
				}
				_, raw, err := readJSONArg("the signal payload", arg, nil)
				if err != nil {
					return err
				}
				if len(raw) > signal.MaxPayload {
					return failf(exitUsage, "the signal payload is %d bytes; the limit is %d", len(raw), signal.MaxPayload)
				}
				return runBulk(cmd, store, &filter, bulkFlags{action: "signal", requestID: requestID, yes: yes, asJSON: asJSON, payload: raw})
			}
			if len(args) == 0 {
				return failf(exitUsage, "give KEY, or filters (--workflow, --status, --label, --after) to signal the runs they select")
			}
			key, arg := args[0], ""
			if len(args) == 2 {
				arg = args[1]
			}
			if err := signal.CheckKey(key); err != nil {
				return failf(exitUsage, "KEY: %v", err)
			}
			_, raw, err := readJSONArg("the signal payload", arg, nil)
			if err != nil {
				return err
			}
			if len(raw) > signal.MaxPayload {
				return failf(exitUsage, "the signal payload is %d bytes; the limit is %d", len(raw), signal.MaxPayload)
			}
			ctx := context.WithoutCancel(cmd.Context())
			if a := liveAPI(ctx, store); a != nil {
				return signalHTTP(cmd, a, key, raw, requireWaiting)
			}
			// A store that holds nothing yet has no run to check the
			// payload against: the signal is buffered for a run to come.
			var target *interpreter.WaitingStep
			var none *storeurl.NoStoreError
			v, err := openView(ctx, store)
			switch {
			case errors.As(err, &none) && requireWaiting:
				return failf(exitFailed, "no run waits on %q: %s holds no run yet; nothing sent", key, store)
			case errors.As(err, &none):
			case err != nil:
				return err
			default:
				var verr error
				target, verr = checkSignal(ctx, v, key, raw, requireWaiting)
				_ = v.Close()
				if verr != nil {
					return verr
				}
			}
			sess, err := openSession(ctx, store, engineOptions{name: "signal", brief: true})
			if err != nil {
				return err
			}
			defer sess.Close()
			opts := signal.Options{RequireWaiting: requireWaiting}
			var res signal.Result
			if sess.e != nil {
				res, err = sess.e.rt.SendSignal(ctx, key, raw, opts)
			} else {
				sctx, stopWatch := sess.watchWriter(ctx)
				res, err = sess.c.SendSignal(sctx, key, raw, opts)
				stopWatch()
				if err != nil && !errors.Is(err, signal.ErrRejected) && !errors.Is(err, signal.ErrNoWaiter) {
					return sess.remoteError(sctx, fmt.Sprintf("signal %q", key), err)
				}
			}
			if err != nil {
				return signalError(key, err)
			}
			if err := sess.Close(); err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(signalOutcomeOf(key, res))
			}
			switch res.Outcome {
			case signal.Delivered:
				fmt.Fprintf(cmd.OutOrStdout(), "signal %q delivered\n", key)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "signal %q buffered: no step waits on it yet; the next one to wait on it receives it\n", key)
				noteBuffered(cmd.ErrOrStderr(), key, target, res.Expires)
			}
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&requireWaiting, "require-waiting", false, "exit 1 without buffering when no run waits on KEY")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"key": KEY, "outcome": "delivered"|"buffered", "expires": TIME}`)
	addBulkFlags(cmd, &filter, &requestID, &yes, "signal")
	return cmd
}

// signalOutcome is what signal --json prints.
type signalOutcome struct {
	Key     string     `json:"key"`
	Outcome string     `json:"outcome"` // "delivered" or "buffered"
	Expires *time.Time `json:"expires,omitempty"`
}

func signalOutcomeOf(key string, res signal.Result) signalOutcome {
	o := signalOutcome{Key: key, Outcome: "delivered"}
	if res.Outcome != signal.Delivered {
		o.Outcome = "buffered"
		if !res.Expires.IsZero() {
			e := res.Expires.UTC()
			o.Expires = &e
		}
	}
	return o
}

// checkSignal refuses, before anything is written, a payload the step
// that will receive it refuses and, with requireWaiting, a signal no step
// waits for. It returns that step when one is known (nil otherwise).
func checkSignal(ctx context.Context, v *view, key string, raw []byte, requireWaiting bool) (*interpreter.WaitingStep, error) {
	if err := v.defs.CheckSignal(ctx, v.r, key, raw); err != nil {
		if errors.Is(err, signal.ErrRejected) {
			return nil, refused(key, err)
		}
		return nil, failf(exitFailed, "signal %q: %v", key, err)
	}
	if requireWaiting {
		job, err := v.insp.SignalWaiter(ctx, key)
		if err != nil {
			return nil, failf(exitFailed, "signal %q: %v", key, err)
		}
		if job == "" {
			return nil, noWaiter(key)
		}
	}
	w, err := v.defs.Waiting(ctx, v.r, key)
	if err != nil {
		return nil, nil // only the note about a buffered signal uses it
	}
	return w, nil
}

// signalError turns the writer's refusal of a signal into its exit code.
func signalError(key string, err error) error {
	switch {
	case errors.Is(err, signal.ErrNoWaiter):
		return noWaiter(key)
	case errors.Is(err, signal.ErrRejected):
		return refused(key, err)
	}
	return failf(exitFailed, "signal %q: %v", key, err)
}

// refused reports a payload refused with signal.ErrRejected, by the
// check here or by the writer, with the reason alone.
func refused(key string, err error) error {
	msg := err.Error()
	var rejected *remote.CommandError
	if errors.As(err, &rejected) {
		msg = rejected.Message
	}
	msg = strings.TrimPrefix(msg, signal.ErrRejected.Error()+": ")
	return failf(exitUsage, "signal %q refused, nothing sent: %s", key, msg)
}

func noWaiter(key string) error {
	return failf(exitFailed, "no run is waiting on %q; nothing was sent (--require-waiting; without it the signal is buffered for the next step that waits on the key)", key)
}

// noteBuffered says on w that a signal was buffered rather than
// delivered, for whom, and how long it stays.
func noteBuffered(w io.Writer, key string, target *interpreter.WaitingStep, expires time.Time) {
	stays := "until a step waits on it or it is cleared"
	if !expires.IsZero() {
		stays = fmt.Sprintf("for %s (until %s, the worker's signal retention)", humanAge(time.Until(expires)), expires.UTC().Format(time.RFC3339))
	}
	if target != nil && target.Expected {
		fmt.Fprintf(w, "tqw-dsl: run %s has not reached step %q yet; the signal stays buffered %s and that step receives it\n", target.RunID, target.Step.ID, stays)
		return
	}
	fmt.Fprintf(w, "tqw-dsl: warning: no run is waiting on %q; the signal stays buffered %s for the next step that waits on it ('tqw-dsl signals' lists buffered signals; --require-waiting refuses instead)\n", key, stays)
}

// signalHTTP sends the signal to the live writer's HTTP API, which checks
// it as the store path does and answers once it is durable.
func signalHTTP(cmd *cobra.Command, a *apiWriter, key string, raw []byte, requireWaiting bool) error {
	res, err := a.c.Signal(context.WithoutCancel(cmd.Context()), key, raw, requireWaiting)
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Code == "no_waiter":
		return noWaiter(key)
	case errors.As(err, &ce) && ce.Code == "signal_rejected":
		return failf(exitUsage, "%s", ce.Message)
	case err != nil:
		return a.apiError(fmt.Sprintf("signal %q", key), err)
	}
	if res.Delivered == "now" {
		fmt.Fprintf(cmd.OutOrStdout(), "signal %q delivered\n", key)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "signal %q buffered: no step waits on it yet; the next one to wait on it receives it\n", key)
	var expires time.Time
	if res.Expires != nil {
		expires = *res.Expires
	}
	noteBuffered(cmd.ErrOrStderr(), key, nil, expires)
	return nil
}
