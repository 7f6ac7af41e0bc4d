package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tqw-dsl/tqw/runtime/queue"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newWorkerCmd) }

func newWorkerCmd() *cobra.Command {
	var (
		store       string
		noShell     bool
		concurrency int
		idleExit    bool
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Work every run in the store until SIGINT or SIGTERM",
		Long: `worker opens the store as its only writer and runs the steps of every run in
it: new ones, ones interrupted by a crash, retries and waits that come due.
On SIGINT or SIGTERM it stops taking steps, lets running ones finish (up to
30s, then cancels them; they run again later) and makes everything durable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if concurrency < 1 {
				return failf(exitUsage, "--concurrency %d: want at least 1", concurrency)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			e, err := openEngine(context.WithoutCancel(ctx), store, engineOptions{noShell: noShell, concurrency: concurrency})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "tqw-dsl worker: working %s (stop with Ctrl-C)\n", store)
			if idleExit {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				go exitWhenIdle(ctx, e, cancel)
			}
			werr := e.rt.Run(ctx)
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
	cmd.Flags().BoolVar(&idleExit, "idle-exit", false, "stop once no step is runnable or running and none is due within a second (runs that wait or sleep longer stay in the store)")
	return cmd
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

// idle reports whether no step can run now or within idleHorizon.
func (e *engine) idle(ctx context.Context) bool {
	soon := e.q.Clock().Now().Add(idleHorizon)
	for _, name := range []string{e.rt.QueueName(), e.rt.NotifyQueueName()} {
		st, err := e.q.Stats(ctx, name)
		if err != nil || st.Pending > 0 || st.Claimed > 0 {
			return false
		}
		after := ""
		for {
			jobs, err := e.q.ListJobs(ctx, name, queue.StateScheduled, after, 256)
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
