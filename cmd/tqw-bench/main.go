package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"time"
)

// bench is one subcommand.
type bench struct {
	name    string
	summary string
	// flags lets a subcommand add its own flags to the common ones.
	flags func(fs *flag.FlagSet)
	// run measures every (store, concurrency) pair in cfg and emits results.
	run func(ctx context.Context, cfg *config) error
}

var benches = map[string]*bench{}

func register(b *bench) {
	if _, dup := benches[b.name]; dup {
		panic("tqw-bench: duplicate subcommand " + b.name)
	}
	benches[b.name] = b
}

// config holds the common flags.
type config struct {
	stores      []string
	concurrency []int
	duration    time.Duration
	ops         int
	out         io.Writer
}

// Result is one JSON line. Subcommands fill the common fields and may add
// their own in Extra (merged into the same object).
type Result struct {
	Bench       string         `json:"bench"`
	Store       string         `json:"store"`
	Concurrency int            `json:"concurrency"`
	Ops         int64          `json:"ops"`
	Seconds     float64        `json:"seconds"`
	OpsPerSec   float64        `json:"ops_per_sec"`
	P50Ms       float64        `json:"p50_ms"`
	P99Ms       float64        `json:"p99_ms"`
	PutsPerOp   float64        `json:"puts_per_op"`
	GetsPerOp   float64        `json:"gets_per_op"`
	ListsPerOp  float64        `json:"lists_per_op"`
	Extra       map[string]any `json:"-"`
}

// emit writes r as one JSON line.
func (c *config) emit(r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(r.Extra) > 0 {
		m := map[string]any{}
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		for k, v := range r.Extra {
			m[k] = v
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var sb strings.Builder
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			vb, err := json.Marshal(m[k])
			if err != nil {
				return err
			}
			sb.Write(kb)
			sb.WriteByte(':')
			sb.Write(vb)
		}
		sb.WriteByte('}')
		b = []byte(sb.String())
	}
	_, err = fmt.Fprintln(c.out, string(b))
	return err
}

// Latencies collects per-operation durations and reports percentiles.
type Latencies struct{ d []time.Duration }

// Add records one duration. Not safe for concurrent use: give each worker
// its own and Merge them.
func (l *Latencies) Add(d time.Duration) { l.d = append(l.d, d) }

// Merge appends o's durations.
func (l *Latencies) Merge(o *Latencies) { l.d = append(l.d, o.d...) }

// Len is the number of recorded durations.
func (l *Latencies) Len() int { return len(l.d) }

// Percentile returns the p-th percentile (0 < p <= 100) in milliseconds.
func (l *Latencies) Percentile(p float64) float64 {
	if len(l.d) == 0 {
		return 0
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	i := int(float64(len(l.d))*p/100+0.5) - 1
	i = max(0, min(i, len(l.d)-1))
	return float64(l.d[i]) / float64(time.Millisecond)
}

// multiFlag is a repeatable, comma-separated string flag.
type multiFlag []string

// listVar defines a list flag that starts empty at each parse, as
// fs.IntVar resets its variable to the default: the flags live in
// package variables, and one process may parse them more than once.
func listVar(fs *flag.FlagSet, p *multiFlag, name, usage string) {
	*p = nil
	fs.Var(p, name, usage)
}

func (m *multiFlag) String() string { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*m = append(*m, s)
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tqw-bench SUBCOMMAND --store URL [--concurrency N[,N...]] [--duration D | --ops N] [flags]")
	fmt.Fprintln(w, "subcommands:")
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, benches[n].summary)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return 2
	}
	b, ok := benches[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "tqw-bench: unknown subcommand %q\n", args[0])
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("tqw-bench "+b.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var stores, conc multiFlag
	listVar(fs, &stores, "store", "store URL (repeatable or comma-separated), e.g. mem://bench, file:///tmp/b, s3://bucket/prefix?endpoint=127.0.0.1:7070&insecure=1")
	listVar(fs, &conc, "concurrency", "concurrent clients (repeatable or comma-separated)")
	duration := fs.Duration("duration", 0, "measure for this long per run (default 3s unless --ops is set)")
	ops := fs.Int("ops", 0, "measure this many operations per run instead of a duration")
	if b.flags != nil {
		b.flags(fs)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := &config{out: stdout, duration: *duration, ops: *ops}
	if len(stores) == 0 {
		stores = multiFlag{"mem://bench"}
	}
	cfg.stores = stores
	if len(conc) == 0 {
		conc = multiFlag{"1"}
	}
	for _, c := range conc {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "tqw-bench: --concurrency %q: want a positive whole number\n", c)
			return 2
		}
		cfg.concurrency = append(cfg.concurrency, n)
	}
	if cfg.ops < 0 || cfg.duration < 0 {
		fmt.Fprintln(stderr, "tqw-bench: --ops and --duration must not be negative")
		return 2
	}
	if cfg.ops == 0 && cfg.duration == 0 {
		cfg.duration = 3 * time.Second
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := b.run(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "tqw-bench %s: %v\n", b.name, err)
		return 1
	}
	return 0
}

// done reports whether a measurement that has done n operations since start
// should stop, by --ops or --duration.
func (c *config) done(n int64, start time.Time) bool {
	if c.ops > 0 {
		return n >= int64(c.ops)
	}
	return time.Since(start) >= c.duration
}
