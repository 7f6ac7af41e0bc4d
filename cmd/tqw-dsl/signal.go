package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

func init() { commands = append(commands, newSignalCmd) }

func newSignalCmd() *cobra.Command {
	var (
		store          string
		requireWaiting bool
	)
	cmd := &cobra.Command{
		Use:   "signal KEY [JSON|@FILE]",
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

Exit codes: 0 delivered or buffered; 2 a usage error or a payload the
receiving step refuses (nothing written); 1 no run waits on KEY with
--require-waiting (nothing written), or the store failed, or the live
writer did not answer.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, arg := args[0], ""
			if len(args) == 2 {
				arg = args[1]
			}
			if key == "" {
				return failf(exitUsage, "KEY is empty")
			}
			if len(key) > runtime.MaxSignalKeyLen {
				return failf(exitUsage, "KEY is %d bytes; the limit is %d", len(key), runtime.MaxSignalKeyLen)
			}
			_, raw, err := readJSONArg("the signal payload", arg, nil)
			if err != nil {
				return err
			}
			if len(raw) > runtime.MaxSignalPayload {
				return failf(exitUsage, "the signal payload is %d bytes; the limit is %d", len(raw), runtime.MaxSignalPayload)
			}
			ctx := context.WithoutCancel(cmd.Context())
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
			opts := runtime.SignalOptions{RequireWaiting: requireWaiting}
			var res runtime.SignalResult
			if sess.e != nil {
				res, err = sess.e.rt.SendSignal(ctx, key, raw, opts)
			} else {
				sctx, stopWatch := sess.watchWriter(ctx)
				res, err = sess.c.SendSignal(sctx, key, raw, opts)
				stopWatch()
				if err != nil && !errors.Is(err, runtime.ErrSignalRejected) && !errors.Is(err, runtime.ErrNoWaiter) {
					return sess.remoteError(sctx, fmt.Sprintf("signal %q", key), err)
				}
			}
			if err != nil {
				return signalError(key, err)
			}
			if err := sess.Close(); err != nil {
				return err
			}
			switch res.Outcome {
			case runtime.Delivered:
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
	return cmd
}

// checkSignal refuses, before anything is written, a payload the step
// that will receive it refuses and, with requireWaiting, a signal no step
// waits for. It returns that step when one is known (nil otherwise).
func checkSignal(ctx context.Context, v *view, key string, raw []byte, requireWaiting bool) (*interpreter.WaitingStep, error) {
	if err := v.it.CheckSignal(ctx, v.r, key, raw); err != nil {
		if errors.Is(err, runtime.ErrSignalRejected) {
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
	w, err := v.it.Waiting(ctx, v.r, key)
	if err != nil {
		return nil, nil // only the note about a buffered signal uses it
	}
	return w, nil
}

// signalError turns the writer's refusal of a signal into its exit code.
func signalError(key string, err error) error {
	switch {
	case errors.Is(err, runtime.ErrNoWaiter):
		return noWaiter(key)
	case errors.Is(err, runtime.ErrSignalRejected):
		return refused(key, err)
	}
	return failf(exitFailed, "signal %q: %v", key, err)
}

// refused reports a payload refused with runtime.ErrSignalRejected, by the
// check here or by the writer, with the reason alone.
func refused(key string, err error) error {
	msg := err.Error()
	var rejected *remote.CommandError
	if errors.As(err, &rejected) {
		msg = rejected.Message
	}
	msg = strings.TrimPrefix(msg, runtime.ErrSignalRejected.Error()+": ")
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
