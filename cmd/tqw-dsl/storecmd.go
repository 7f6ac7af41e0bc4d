package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/repair"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

func init() { commands = append(commands, newStoreCmd) }

// queueKV is the kv prefix of the store's queue: storage.Options.Prefix's
// default, which openEngine and openView use. Everything the engine keeps
// in kv lives there.
const queueKV = "queue"

func newStoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Check the store's storage engine and repair a broken log (check, truncate)",
		Long: `store works on the storage engine under the runs: the kv store whose log
(WAL objects) and checkpoint (chunks and manifest) hold every run.
docs/OPERATIONS.md says what each problem means and what to do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return failf(exitUsage, "name a subcommand: check or truncate\nrun 'tqw-dsl store --help' for usage")
		},
	}
	cmd.AddCommand(newStoreCheckCmd(), newStoreTruncateCmd())
	return cmd
}

func newStoreCheckCmd() *cobra.Command {
	var (
		store, prefix string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Verify the store read-only: manifest, checkpoint chunks, WAL continuity and checksums",
		Long: `check reads the manifest, every checkpoint chunk, every WAL object after
the checkpoint and the list of large values; then (with the default
--prefix, when the log reads) every workflow definition and large step
output, checked against its SHA-256, and every run's records, sealed
segments included. It prints one line per problem: the object, then what
is wrong with it. It makes only GET, LIST
and HEAD requests, so it changes nothing and can run next to a worker.

Exit status: 0 healthy, 1 a problem found (or no store at --store),
2 a usage error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := context.WithoutCancel(cmd.Context())
			s, err := openReadOnlyStore(ctx, store)
			if err != nil {
				return err
			}
			rep, err := repair.Check(ctx, s, repair.Options{Prefix: prefix, Logger: logger(cmd.ErrOrStderr())})
			if err != nil {
				return failf(exitFailed, "checking %s: %v", store, err)
			}
			if !rep.Exists && rep.Healthy() {
				return noStore(store, prefix)
			}
			if rep.BreakAt == 0 && prefix == queueKV {
				// The log reads: check the runs' own objects too.
				more, err := checkRunObjects(ctx, store)
				if err != nil {
					return err
				}
				rep.Problems = append(rep.Problems, more...)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if rep.Problems == nil {
					rep.Problems = []repair.Problem{} // [] rather than null
				}
				if err := json.NewEncoder(out).Encode(checkJSON{Store: store, Healthy: rep.Healthy(), Report: rep}); err != nil {
					return failf(exitFailed, "writing output: %v", err)
				}
			} else {
				printCheck(out, store, rep)
			}
			if !rep.Healthy() {
				return failf(exitFailed, "%s: %s found; see docs/OPERATIONS.md", store, plural(len(rep.Problems), "problem"))
			}
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&prefix, "prefix", queueKV, "kv prefix inside the store (the runs' queue lives under \"queue\")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	return cmd
}

// checkRunObjects checks the objects beside the kv that the runs read:
// definitions, large outputs and, through each run's records, the sealed
// segments (interpreter.CheckObjects).
func checkRunObjects(ctx context.Context, url string) ([]repair.Problem, error) {
	v, err := openView(ctx, url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = v.Close() }()
	problems, err := interpreter.CheckObjects(ctx, v.store, v.records(), v.insp)
	if err != nil {
		return nil, failf(exitFailed, "checking the runs' objects in %s: %v", url, err)
	}
	return problems, nil
}

// checkJSON is the report store check --json prints.
type checkJSON struct {
	Store   string `json:"store"`
	Healthy bool   `json:"healthy"`
	repair.Report
}

func printCheck(w io.Writer, url string, rep repair.Report) {
	for _, p := range rep.Problems {
		fmt.Fprintln(w, p.String())
	}
	where := fmt.Sprintf("%s in %s", rep.Prefix, url)
	summary := fmt.Sprintf("epoch %d, checkpoint %d (%s), WAL from sequence %d: %s, %s, %s; %s, %s",
		rep.Epoch, rep.CheckpointID, plural(rep.Chunks, "chunk"), rep.FirstLiveWAL,
		plural(rep.WALObjects, "object"), plural(rep.Fences, "fence"), plural(rep.Commits, "commit"),
		plural(rep.Keys, "key"), plural(rep.LargeValues, "large value"))
	if rep.Healthy() {
		fmt.Fprintf(w, "ok: %s: %s\n", where, summary)
		return
	}
	fmt.Fprintf(w, "%s in %s: %s\n", plural(len(rep.Problems), "problem"), where, summary)
	if rep.BreakAt != 0 {
		fmt.Fprintf(w, "the log breaks at WAL sequence %d (good up to %d): the store cannot be opened or read until it is repaired.\n", rep.BreakAt, rep.LastGoodWAL)
		fmt.Fprintf(w, "restore the objects named above from a backup or bucket versioning, or discard the log from there on:\n")
		fmt.Fprintf(w, "  tqw-dsl store truncate --store %s --at %d          (prints what it discards, changes nothing)\n", url, rep.BreakAt)
		fmt.Fprintf(w, "  tqw-dsl store truncate --store %s --at %d --yes    (discards it)\n", url, rep.BreakAt)
	} else {
		fmt.Fprintf(w, "restore the objects named above from a backup or bucket versioning.\n")
	}
}

func newStoreTruncateCmd() *cobra.Command {
	var (
		store, prefix string
		at            uint64
		yes, asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "truncate",
		Short: "Cut the log where it breaks, discarding every commit from there on",
		Long: `truncate is the last resort for a log with a missing or damaged WAL object
that cannot be restored (see 'tqw-dsl store check' and docs/OPERATIONS.md).
It keeps the checkpoint and the log before --at (default: where the log
breaks) and discards every WAL object from --at on: every commit in them
is lost. It prints each discarded object (sequence, epoch, commits, bytes)
and the totals.

Without --yes it changes nothing and exits 2. With --yes it takes the
store's writer lease (stop every worker first), copies the discarded
objects under <prefix>/discarded/<epoch>/ with a report.json, and switches
the store to a checkpoint past them, so it opens again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := context.WithoutCancel(cmd.Context())
			open := openReadOnlyStore // without --yes it only reads
			if yes {
				open = openExistingStore
			}
			s, err := open(ctx, store)
			if err != nil {
				return err
			}
			log := logger(cmd.ErrOrStderr())
			opts := repair.Options{Prefix: prefix, Logger: log}
			out := cmd.OutOrStdout()
			if !cmd.Flags().Changed("at") {
				rep, err := repair.Check(ctx, s, opts)
				if err != nil {
					return failf(exitFailed, "checking %s: %v", store, err)
				}
				switch {
				case !rep.Exists && rep.Healthy():
					return noStore(store, prefix)
				case rep.BreakAt == 0 && rep.Healthy():
					fmt.Fprintf(out, "the log of %s in %s is whole: nothing to truncate\n", prefix, store)
					return nil
				case rep.BreakAt == 0:
					printCheck(cmd.ErrOrStderr(), store, rep)
					return failf(exitFailed, "%s: the log is whole, so truncating it repairs nothing; restore the objects named above (docs/OPERATIONS.md)", store)
				}
				at = rep.BreakAt
			}
			if !yes {
				plan, err := repair.Plan(ctx, s, opts, at)
				if err != nil {
					return truncateError(store, err)
				}
				if err := printTruncation(out, store, plan, asJSON); err != nil {
					return err
				}
				return failf(exitUsage, "nothing changed: run again with --yes to discard %s and %s from WAL sequence %d on",
					plural(len(plan.Discarded), "WAL object"), plural(plan.Commits, "commit"), at)
			}
			// Hold the writer lease, so no worker starts while the log is
			// cut; TruncateAt fences any writer still running anyway.
			held, err := acquireLease(ctx, s, engineOptions{name: "store-truncate", log: log})
			var active *lease.ActiveError
			if errors.As(err, &active) {
				return failf(exitFailed, "%s is worked by %s: stop it first, then run this again", store, active.Holder)
			}
			if err != nil {
				return failf(exitFailed, "taking the writer lease of %s: %v", store, err)
			}
			defer func() {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := held.Release(rctx); err != nil {
					log.Warn("releasing the writer lease failed; it expires by itself", "err", err)
				}
			}()
			done, err := repair.Truncate(ctx, s, opts, at)
			if err != nil {
				return truncateError(store, err)
			}
			return printTruncation(out, store, done, asJSON)
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&prefix, "prefix", queueKV, "kv prefix inside the store (the runs' queue lives under \"queue\")")
	cmd.Flags().Uint64Var(&at, "at", 0, "first WAL sequence to discard (default: where the log breaks, as 'store check' reports)")
	cmd.Flags().BoolVar(&yes, "yes", false, "really discard the commits (without it, only print what would be discarded)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the truncation as one JSON object")
	return cmd
}

func truncateError(url string, err error) error {
	if errors.Is(err, repair.ErrTruncatePoint) {
		return failf(exitUsage, "%s: %v", url, err)
	}
	return failf(exitFailed, "truncating the log of %s: %v", url, err)
}

func printTruncation(w io.Writer, url string, t repair.Truncation, asJSON bool) error {
	if asJSON {
		if err := json.NewEncoder(w).Encode(t); err != nil {
			return failf(exitFailed, "writing output: %v", err)
		}
		return nil
	}
	verb := "truncating the log at WAL sequence %d would discard:\n"
	if t.Applied {
		verb = "truncated the log at WAL sequence %d, discarding:\n"
	}
	fmt.Fprintf(w, verb, t.At)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, d := range t.Discarded {
		switch {
		case d.Missing:
			fmt.Fprintf(tw, "  %s\tmissing\n", d.Object)
		case d.Damaged != "":
			fmt.Fprintf(tw, "  %s\tdamaged, %d bytes: %s\n", d.Object, d.Bytes, d.Damaged)
		case d.Fence:
			fmt.Fprintf(tw, "  %s\tepoch %d\tfence\t%d bytes\n", d.Object, d.Epoch, d.Bytes)
		default:
			fmt.Fprintf(tw, "  %s\tepoch %d\t%s\t%d bytes\n", d.Object, d.Epoch, plural(d.Commits, "commit"), d.Bytes)
		}
	}
	_ = tw.Flush()
	epochs := make([]string, len(t.Epochs))
	for i, e := range t.Epochs {
		epochs[i] = fmt.Sprint(e)
	}
	last := t.Discarded[len(t.Discarded)-1].Seq
	fmt.Fprintf(w, "total: %s (sequences %d to %d), %s, %d bytes, epochs %s", plural(len(t.Discarded), "WAL object"), t.At, last,
		plural(t.Commits, "commit"), t.Bytes, strings.Join(epochs, ", "))
	if t.Missing > 0 {
		fmt.Fprintf(w, "; %d missing", t.Missing)
	}
	if t.Unreadable > 0 {
		fmt.Fprintf(w, "; %d unreadable, whose commits are not counted", t.Unreadable)
	}
	fmt.Fprintln(w)
	if len(t.DroppedKeys) > 0 {
		fmt.Fprintf(w, "%s of the kept state lose their large value (a discarded commit replaced it) and are dropped:\n", plural(len(t.DroppedKeys), "key"))
		for _, k := range t.DroppedKeys {
			fmt.Fprintf(w, "  %q\n", k)
		}
	}
	if !t.Applied {
		fmt.Fprintf(w, "the store would keep its checkpoint and the log up to WAL sequence %d: %s\n", t.At-1, plural(t.Keys, "key"))
		return nil
	}
	fmt.Fprintf(w, "the store keeps its checkpoint and the log up to WAL sequence %d (%s) and opens again; its log continues at sequence %d\n",
		t.At-1, plural(t.Keys, "key"), t.FirstLiveWAL)
	fmt.Fprintf(w, "copies of the discarded objects and this report: %s (%s)\n", t.Copies, url)
	return nil
}

// noStore is the error of a store check or truncate finding nothing.
func noStore(url, prefix string) error {
	return failf(exitFailed, "no store at %s: %s/manifest does not exist and nothing else of a store is there (check --store and --prefix)", url, prefix)
}

// openExistingStore opens the store at url for writing once a read-only
// open found a store there: a missing file:// folder is an error naming
// the URL, where opening the file store would create it.
func openExistingStore(ctx context.Context, url string) (objstore.Store, error) {
	if _, err := openReadOnlyStore(ctx, url); err != nil {
		return nil, err
	}
	return openStore(ctx, url)
}
