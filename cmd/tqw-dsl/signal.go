package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/runtime"
)

func init() { commands = append(commands, newSignalCmd) }

func newSignalCmd() *cobra.Command {
	var store string
	cmd := &cobra.Command{
		Use:   "signal KEY [JSON|@FILE]",
		Short: "Send a signal (a JSON payload, default null) to the run waiting on KEY",
		Long: `signal delivers a JSON payload to the wait_signal step waiting on KEY (by
default "<run id>:<step id>"), or buffers it for the next step that waits on
KEY. When a step waits and its with.schema is set, the payload is checked
first: a malformed or non-matching payload is rejected with exit code 2 and
nothing is written.

When a worker (or run) holds the store, the signal is sent to it through the
store's inbox, which applies it exactly once, and signal waits for its
answer (up to 2m; without one it exits 1 and the signal stays in the inbox
until a writer applies it). Otherwise signal opens the store as its writer
for the moment it takes.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, arg := args[0], ""
			if len(args) == 2 {
				arg = args[1]
			}
			if key == "" {
				return failf(exitUsage, "KEY is empty")
			}
			_, raw, err := readJSONArg("the signal payload", arg, nil)
			if err != nil {
				return err
			}
			if len(raw) > runtime.MaxSignalPayload {
				return failf(exitUsage, "the signal payload is %d bytes; the limit is %d", len(raw), runtime.MaxSignalPayload)
			}
			ctx := context.WithoutCancel(cmd.Context())
			v, err := openView(ctx, store)
			if err != nil {
				return err
			}
			verr := checkSignal(ctx, v, key, raw)
			_ = v.Close()
			if verr != nil {
				return verr
			}
			sess, err := openSession(ctx, store, engineOptions{name: "signal", brief: true})
			if err != nil {
				return err
			}
			defer sess.Close()
			var res runtime.SignalOutcome
			if sess.e != nil {
				res, err = sess.e.rt.Signal(ctx, key, raw)
			} else {
				sctx, stopWatch := sess.watchWriter(ctx)
				res, err = sess.c.Signal(sctx, key, raw)
				stopWatch()
				if err != nil {
					return sess.remoteError(sctx, fmt.Sprintf("signal %q", key), err)
				}
			}
			if err != nil {
				return failf(exitFailed, "signal %q: %v", key, err)
			}
			if err := sess.Close(); err != nil {
				return err
			}
			switch res {
			case runtime.Delivered:
				fmt.Fprintf(cmd.OutOrStdout(), "signal %q delivered\n", key)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "signal %q buffered: no step waits on it yet; the next one to wait on it receives it\n", key)
			}
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	return cmd
}

// checkSignal validates a payload against the schema of the step waiting
// on key, when one waits in a run that is still active.
func checkSignal(ctx context.Context, v *view, key string, raw []byte) error {
	w, err := v.it.Waiting(ctx, v.r, key)
	if err != nil {
		return failf(exitFailed, "signal %q: %v", key, err)
	}
	if w == nil {
		return nil
	}
	if st, err := v.insp.Status(ctx, w.RunID); err != nil || st.State.Terminal() {
		return nil // a stale entry of a run that ended
	}
	if err := w.Check(raw); err != nil {
		return failf(exitUsage, "signal %q: %v", key, err)
	}
	return nil
}
