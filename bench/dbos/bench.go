package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	// The driver package registers modernc.org/sqlite ("sqlite" in
	// database/sql) with DBOS; DBOS needs it even with a custom *sql.DB to
	// classify SQLite errors.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
)

// stepsPerRun is the number of steps in the workflow, as in tqw's peer
// workflow.
const stepsPerRun = 10

// wantResult is what a complete run returns: the sum of the step values
// 1..stepsPerRun, so a run that skipped or repeated a step cannot pass.
const wantResult = stepsPerRun * (stepsPerRun + 1) / 2

// Synchronous levels accepted by --synchronous. DBOS's own pool uses NORMAL.
const (
	syncFull   = "FULL"
	syncNormal = "NORMAL"
)

// sqliteSyncNames maps PRAGMA synchronous's numeric answer to its name.
var sqliteSyncNames = map[int]string{0: "OFF", 1: syncNormal, 2: syncFull, 3: "EXTRA"}

// stepNames are the checkpoint names of the steps, built once so the
// workflow does not format strings on the measured path.
var stepNames = func() [stepsPerRun]string {
	var n [stepsPerRun]string
	for i := range n {
		n[i] = fmt.Sprintf("step-%d", i+1)
	}
	return n
}()

// errShortRun reports a run that did not return the full result.
var errShortRun = errors.New("workflow run returned a wrong result")

// sqliteOptions is how the system database is opened.
type sqliteOptions struct {
	Synchronous string // syncFull or syncNormal
}

// normalizeSync validates a --synchronous value and returns its canonical
// spelling.
func normalizeSync(s string) (string, error) {
	switch u := strings.ToUpper(strings.TrimSpace(s)); u {
	case syncFull, syncNormal:
		return u, nil
	default:
		return "", fmt.Errorf("--synchronous %q: want FULL (fsync every commit) or NORMAL (DBOS default)", s)
	}
}

// sqliteDSN builds the modernc.org/sqlite DSN for path. It mirrors DBOS
// v1.8.0's own SQLite pool (internal/sysdb/sqlite_pool.go OpenSQLitePool):
// BEGIN IMMEDIATE transactions, busy_timeout 5000 ms, foreign keys on, WAL;
// only synchronous is ours to choose. The pragmas are DSN parameters so
// every connection the pool opens gets them.
func sqliteDSN(path string, o sqliteOptions) string {
	return "file:" + path +
		"?_txlock=immediate" +
		"&_pragma=busy_timeout(5000)" +
		"&_pragma=foreign_keys(ON)" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(" + o.Synchronous + ")"
}

// openSQLite opens the system database at path with DBOS's pool limits
// (8 open, 4 idle connections, one-hour lifetime).
func openSQLite(ctx context.Context, path string, o sqliteOptions) (*sql.DB, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path, o))
	if err != nil {
		return nil, fmt.Errorf("open sqlite system database %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(4)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite system database %s: %w", path, err)
	}
	return db, nil
}

// sqliteSettings is what the connections of a pool actually run with.
type sqliteSettings struct {
	Synchronous string
	JournalMode string
}

// checkSQLiteSettings opens every connection the pool allows at once and
// reads PRAGMA synchronous and journal_mode on each. It fails if two
// connections disagree, so the reported settings hold for every checkpoint.
func checkSQLiteSettings(ctx context.Context, db *sql.DB) (sqliteSettings, error) {
	n := db.Stats().MaxOpenConnections
	if n <= 0 {
		n = 1
	}
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var got sqliteSettings
	for i := range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return got, fmt.Errorf("check sqlite settings: connection %d: %w", i, err)
		}
		conns = append(conns, c)
		var syncNum int
		var s sqliteSettings
		if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncNum); err != nil {
			return got, fmt.Errorf("check sqlite settings: PRAGMA synchronous: %w", err)
		}
		s.Synchronous = sqliteSyncNames[syncNum]
		if s.Synchronous == "" {
			s.Synchronous = fmt.Sprintf("unknown(%d)", syncNum)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&s.JournalMode); err != nil {
			return got, fmt.Errorf("check sqlite settings: PRAGMA journal_mode: %w", err)
		}
		s.JournalMode = strings.ToLower(s.JournalMode)
		if i == 0 {
			got = s
		} else if s != got {
			return got, fmt.Errorf("check sqlite settings: connection %d runs %+v, connection 0 runs %+v", i, s, got)
		}
	}
	return got, nil
}

// peer is one launched DBOS instance with the no-op workflow registered.
type peer struct {
	ctx   dbos.Context
	db    *sql.DB
	path  string
	wf    dbos.Workflow[int, int] // the registered workflow, resolved once
	steps atomic.Int64            // step function executions, to check runs were complete
}

// newPeer opens a SQLite system database in dir, launches DBOS on it and
// registers the workflow. The caller must call close.
func newPeer(ctx context.Context, dir string, o sqliteOptions, logger *slog.Logger) (*peer, error) {
	p := &peer{path: filepath.Join(dir, "dbos.sqlite")}
	db, err := openSQLite(ctx, p.path, o)
	if err != nil {
		return nil, err
	}
	p.db = db
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:        "tqw-peer-bench",
		SQLiteSystemDB: db,
		Logger:         logger,
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("create DBOS context on %s: %w", p.path, err)
	}
	p.ctx = dctx
	p.wf = p.tenSteps
	dbos.RegisterWorkflow(dctx, p.wf, dbos.WithWorkflowName("tqw-peer-ten-noop-steps"))
	if err := dbos.Launch(dctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("launch DBOS on %s: %w", p.path, err)
	}
	return p, nil
}

// close shuts DBOS down and closes the database handle, which DBOS does
// not own when given SQLiteSystemDB.
func (p *peer) close() error {
	errShutdown := dbos.Shutdown(p.ctx, 10*time.Second)
	if errShutdown != nil {
		errShutdown = fmt.Errorf("shut down DBOS: %w", errShutdown)
	}
	errClose := p.db.Close()
	if errClose != nil {
		errClose = fmt.Errorf("close sqlite system database %s: %w", p.path, errClose)
	}
	return errors.Join(errShutdown, errClose)
}

// tenSteps is the workflow: stepsPerRun sequential DBOS steps, each a no-op
// that returns its 1-based index, checkpointed by DBOS before the next
// starts. It returns the sum of the step results.
func (p *peer) tenSteps(ctx dbos.Context, _ int) (int, error) {
	sum := 0
	for i := range stepsPerRun {
		v, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) {
			p.steps.Add(1)
			return i + 1, nil
		}, dbos.WithStepName(stepNames[i]))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", stepNames[i], err)
		}
		sum += v
	}
	return sum, nil
}

// runOne starts one workflow and waits for its result, returning its
// workflow ID.
func (p *peer) runOne(input int) (string, error) {
	h, err := dbos.RunWorkflow(p.ctx, p.wf, input)
	if err != nil {
		return "", fmt.Errorf("start workflow: %w", err)
	}
	got, err := h.GetResult()
	if err != nil {
		return h.GetWorkflowID(), fmt.Errorf("workflow %s: %w", h.GetWorkflowID(), err)
	}
	if got != wantResult {
		return h.GetWorkflowID(), fmt.Errorf("workflow %s returned %d, want %d: %w", h.GetWorkflowID(), got, wantResult, errShortRun)
	}
	return h.GetWorkflowID(), nil
}

// levelResult is what one concurrency level measured.
type levelResult struct {
	Runs      int64
	Seconds   float64
	Latencies latencies
}

// runLevel runs workflows with concurrency in flight until ops runs have
// completed (ops > 0) or duration has passed. Every run must succeed.
func (p *peer) runLevel(ctx context.Context, concurrency, ops int, duration time.Duration) (levelResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		claimed atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		all     latencies
	)
	stepsBefore := p.steps.Load()
	start := time.Now()
	deadline := start.Add(duration)
	for range concurrency {
		wg.Go(func() {
			var mine latencies
			defer func() {
				mu.Lock()
				all.merge(&mine)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				n := claimed.Add(1)
				if ops > 0 && n > int64(ops) {
					return
				}
				if ops <= 0 && !time.Now().Before(deadline) {
					return
				}
				t0 := time.Now()
				if _, err := p.runOne(int(n)); err != nil {
					cancel(err)
					return
				}
				mine.add(time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return levelResult{}, err
	}
	runs := int64(all.len())
	if steps := p.steps.Load() - stepsBefore; steps != runs*stepsPerRun {
		return levelResult{}, fmt.Errorf("%d runs executed %d steps, want %d: %w", runs, steps, runs*stepsPerRun, errShortRun)
	}
	return levelResult{Runs: runs, Seconds: elapsed.Seconds(), Latencies: all}, nil
}

// latencies collects per-run durations; percentiles use the same
// nearest-rank rule as cmd/tqw-bench so the two sides compare.
type latencies struct{ d []time.Duration }

func (l *latencies) add(d time.Duration) { l.d = append(l.d, d) }
func (l *latencies) merge(o *latencies)  { l.d = append(l.d, o.d...) }
func (l *latencies) len() int            { return len(l.d) }
func (l *latencies) percentile(p float64) float64 {
	if len(l.d) == 0 {
		return 0
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	i := int(float64(len(l.d))*p/100+0.5) - 1
	i = max(0, min(i, len(l.d)-1))
	return float64(l.d[i]) / float64(time.Millisecond)
}
