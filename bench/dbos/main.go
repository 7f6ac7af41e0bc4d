package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dbosModule is the module whose version the JSON lines report.
const dbosModule = "github.com/dbos-inc/dbos-transact-golang"

// result is one JSON line; the first fields match cmd/tqw-bench's Result.
type result struct {
	Bench       string  `json:"bench"`
	System      string  `json:"system"`
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	Ops         int64   `json:"ops"`
	Seconds     float64 `json:"seconds"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	RunsPerSec  float64 `json:"runs_per_sec"`
	StepsPerSec float64 `json:"steps_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	StepsPerRun int     `json:"steps_per_run"`
	Synchronous string  `json:"sqlite_synchronous"`
	JournalMode string  `json:"journal_mode"`
	FS          string  `json:"fs"`
	Warmup      int     `json:"warmup_runs"`
	DBOSVersion string  `json:"dbos_version"`
}

// intList is a repeatable, comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a positive integer", f)
		}
		*l = append(*l, n)
	}
	return nil
}

// options are the parsed command-line flags.
type options struct {
	concurrency intList
	duration    time.Duration
	ops         int
	warmup      int
	synchronous string
	dir         string
	verbose     bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("dbos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&o.concurrency, "concurrency", "workflows in flight at once; repeatable or comma-separated (default 1)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each concurrency level runs (ignored with --ops)")
	fs.IntVar(&o.ops, "ops", 0, "workflow runs per concurrency level; 0 means run for --duration")
	fs.IntVar(&o.warmup, "warmup", 10, "unmeasured workflow runs before each level")
	fs.StringVar(&o.synchronous, "synchronous", syncFull, "SQLite synchronous level: FULL fsyncs every commit (like tqw), NORMAL is DBOS's default")
	fs.StringVar(&o.dir, "dir", os.TempDir(), "parent of the temporary directory holding the SQLite system database")
	fs.BoolVar(&o.verbose, "v", false, "show DBOS's info logs on stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run . [--concurrency N[,N...]] [--duration D | --ops N] [--synchronous FULL|NORMAL] [--dir DIR]")
		fmt.Fprintln(stderr, "Runs a 10-step no-op workflow on DBOS Transact (SQLite system database); prints one JSON line per concurrency level.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q; see -h", fs.Arg(0))
	}
	if len(o.concurrency) == 0 {
		o.concurrency = intList{1}
	}
	if o.ops < 0 {
		return o, fmt.Errorf("--ops %d: want 0 or more", o.ops)
	}
	if o.ops == 0 && o.duration <= 0 {
		return o, fmt.Errorf("--duration %s: want a positive duration, or set --ops", o.duration)
	}
	if o.warmup < 0 {
		return o, fmt.Errorf("--warmup %d: want 0 or more", o.warmup)
	}
	s, err := normalizeSync(o.synchronous)
	if err != nil {
		return o, err
	}
	o.synchronous = s
	return o, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dbos peer bench:", err)
		os.Exit(1)
	}
}

// run parses args, runs every concurrency level on a fresh database and
// writes one JSON line per level to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	root, err := os.MkdirTemp(o.dir, "tqw-dbos-bench-")
	if err != nil {
		return fmt.Errorf("create temporary directory in %s (set --dir to a writable directory): %w", o.dir, err)
	}
	defer func() {
		if rmErr := os.RemoveAll(root); rmErr != nil {
			fmt.Fprintf(stderr, "dbos peer bench: remove %s: %v\n", root, rmErr)
		}
	}()

	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for _, c := range o.concurrency {
		r, err := runLevel(ctx, o, root, c, logger)
		if err != nil {
			return fmt.Errorf("concurrency %d: %w", c, err)
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	}
	return nil
}

// runLevel measures one concurrency level on its own fresh database.
func runLevel(ctx context.Context, o options, root string, concurrency int, logger *slog.Logger) (result, error) {
	dir := filepath.Join(root, fmt.Sprintf("c%d", concurrency))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return result{}, fmt.Errorf("create %s: %w", dir, err)
	}
	// A level listed twice reuses nothing: start from an empty directory.
	if err := clearDir(dir); err != nil {
		return result{}, err
	}
	p, err := newPeer(ctx, dir, sqliteOptions{Synchronous: o.synchronous}, logger)
	if err != nil {
		return result{}, err
	}
	lr, runErr := func() (levelResult, error) {
		if o.warmup > 0 {
			if _, err := p.runLevel(ctx, min(concurrency, o.warmup), o.warmup, 0); err != nil {
				return levelResult{}, fmt.Errorf("warm-up: %w", err)
			}
		}
		return p.runLevel(ctx, concurrency, o.ops, o.duration)
	}()
	// Read the settings after the run so they cover connections opened
	// during it.
	settings, checkErr := checkSQLiteSettings(ctx, p.db)
	closeErr := p.close()
	if err := errors.Join(runErr, checkErr, closeErr); err != nil {
		return result{}, err
	}
	if settings.Synchronous != o.synchronous || settings.JournalMode != "wal" {
		return result{}, fmt.Errorf("system database ran with synchronous=%s journal_mode=%s, want synchronous=%s journal_mode=wal",
			settings.Synchronous, settings.JournalMode, o.synchronous)
	}
	runsPerSec := float64(lr.Runs) / lr.Seconds
	return result{
		Bench:       "peers",
		System:      "dbos-sqlite",
		Store:       fmt.Sprintf("sqlite:%s?journal_mode=%s&synchronous=%s", p.path, settings.JournalMode, settings.Synchronous),
		Concurrency: concurrency,
		Ops:         lr.Runs,
		Seconds:     lr.Seconds,
		OpsPerSec:   runsPerSec,
		RunsPerSec:  runsPerSec,
		StepsPerSec: runsPerSec * stepsPerRun,
		P50Ms:       lr.Latencies.percentile(50),
		P99Ms:       lr.Latencies.percentile(99),
		StepsPerRun: stepsPerRun,
		Synchronous: settings.Synchronous,
		JournalMode: settings.JournalMode,
		FS:          fsType(dir),
		Warmup:      o.warmup,
		DBOSVersion: moduleVersion(dbosModule),
	}, nil
}

// clearDir removes everything inside dir.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clear %s: %w", dir, err)
		}
	}
	return nil
}

// moduleVersion returns the version of module linked into this binary, or
// "unknown" when the build carries no module information.
func moduleVersion(module string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}
