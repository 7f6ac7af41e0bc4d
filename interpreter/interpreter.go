package interpreter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/storage"

	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/runlabel"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrDefinitionMissing reports a run whose pinned definition is not in
	// the store (deleted, or a store that never held it).
	ErrDefinitionMissing = errors.New("interpreter: pinned workflow definition missing from the store")
	// ErrCorruptState reports a step payload or record that does not decode.
	ErrCorruptState = errors.New("interpreter: corrupt run state")
	// ErrRecursiveCall reports a workflow that calls itself, directly or not.
	ErrRecursiveCall = errors.New("interpreter: recursive call")
)

// Key layout. Objects live in the run store; KV keys in the queue's caller
// KV (outside the runtime's "workflow/" prefix).
const (
	defsPrefix    = "tqw/defs/"    // object: definition source by hash
	outputsPrefix = "tqw/outputs/" // object: large output, <run>/<n>
	kvOut         = "tqw/out/"     // KV: <run>/<step id> latest output
	kvHist        = "tqw/hist/"    // KV: <run>/<n, 10 digits>[.<seq, 3 digits>] history record
	kvWait        = "tqw/wait/"    // KV: <signal key> -> waiting step
	kvChild       = "tqw/child/"   // KV: <parent run>/<child run>, written with the child's submission
	kvExpire      = "tqw/expire/"  // KV: <finished ms, 16 hex>/<run> retention marker
	kvVisits      = "tqw/visits/"  // KV: <run>/<step id> the step's kept visits (visits.go)
)

// headerParent is the run header naming the signal key a child run's
// termination is reported to.
const headerParent = "tqw.parent"

// headerRedriveAt is the step a redrive last resumed the run at; like a
// fork's lineage it marks a run that may reuse paid answers (answers.go).
const headerRedriveAt = "tqw.redrive.at"

// Run headers the interpreter writes.
const (
	// HeaderWorkflow carries the workflow's name, for listings.
	HeaderWorkflow = "tqw.workflow"
	// HeaderDefinition carries the content hash of the definition the run
	// is pinned to, so a finished run still names it.
	HeaderDefinition = "tqw.definition"
	// HeaderTraceParent carries the W3C traceparent of the
	// span that submitted the run, written with the submission (no request
	// of its own): the run spans of every process that works the run are its
	// children, so a run resumed elsewhere after a crash stays in one trace.
	HeaderTraceParent = "tqw.traceparent"
	// HeaderForkFrom and HeaderForkAt are a fork's lineage: the run it
	// was forked from and the step it started at. They thread through
	// every step, so status, list and the API show it.
	HeaderForkFrom = "tqw.fork.from"
	HeaderForkAt   = "tqw.fork.at"
)

// LabelWorkflow is the run label carrying the workflow's name, so a
// listing filtered by workflow walks that label's index
// (runstate.ListOptions.Labels), not every run.
const LabelWorkflow = runlabel.Workflow

// InlineOutputLimit is the largest encoded output kept in the KV record;
// larger ones go to their own object.
const InlineOutputLimit = 64 << 10

// Options configure New.
type Options struct {
	// Actions is the registry of actions steps may call; required.
	Actions *actions.Registry
	// Getenv reads secrets; nil means os.Getenv.
	Getenv func(string) string
	// Clock gives now(); nil means the queue's clock.
	Clock clock.Clock
	// Rand drives retry jitter and uuid(); nil means a randomly seeded source.
	Rand *rand.Rand
	// Logger receives logs (secrets redacted); nil discards.
	Logger *slog.Logger
	// Events, when set, is called as steps start and end. It must not block.
	Events func(Event)
	// Ended, when set, is called with the outcome of every run that did
	// not succeed (failed, cancelled: they have no step event of their
	// own when ended from outside) once the interpreter handled its end
	// notification: at least once, again if the notification is retried.
	// It must not block.
	Ended func(*runstate.Outcome)
	// TracerProvider, when set, traces runs: a span per run in this
	// process, a child span per step delivery, and the submission's span
	// (see HeaderTraceParent); nil creates no span (package tracing).
	TracerProvider trace.TracerProvider
	// Load options for definitions. The registry's actions that are not
	// built in are added to ExtraActions with the schemas they declare
	// (actions.SchemaDeclarer), so an action is registered in one place.
	DSL dsl.Options
	// LeaseMargin is added to a step's timeout when extending its lease
	// before a long action; 0 means 30s.
	LeaseMargin time.Duration
	// Retention is how long the records of a terminated run (outputs,
	// history, large-output objects) are kept; Sweep removes them after.
	// 0 keeps them forever. Match it to the runtime's Options.ResultRetention,
	// so a run's status and its history expire together.
	Retention time.Duration
	// SweepInterval is SweepLoop's period; 0 means DefaultSweepInterval.
	SweepInterval time.Duration
	// Runtime configures the runtime New builds for the interpreter. Leave
	// TerminalHook nil: the interpreter is its runtime's terminal hook.
	Runtime runtime.Options
	// HistoryVisits is how many visits of each step a run's history
	// keeps, the latest (visits.go): older visits' records, and the large
	// outputs no step reads any more, are deleted as the run goes on,
	// and the history counts them. 0 means DefaultHistoryVisits; a
	// negative value keeps every visit.
	HistoryVisits int
	// StepDurations, when set, is called after each DSL step RunStep runs
	// with the time the interpreter spent on it (by Clock; the first step
	// of a delivery includes reading the run's state and definition, the
	// runtime's commits are not included), for benchmarks. It must not
	// block.
	StepDurations func(time.Duration)
}

// Interpreter executes parsed workflows in the runtime New builds for it,
// as its runtime.StepRunner and terminal hook. It reads its store as a
// View does. Safe for concurrent use.
type Interpreter struct {
	*View
	inputs inputCache
	acts   *actions.Registry
	getenv func(string) string
	clock  clock.Clock
	log    *slog.Logger
	events func(Event)
	ended  func(*runstate.Outcome)
	margin time.Duration
	// stepDurations is Options.StepDurations.
	stepDurations func(time.Duration)
	// historyVisits is Options.HistoryVisits with the default applied;
	// 0 keeps every visit.
	historyVisits int

	retention  time.Duration
	sweepEvery time.Duration

	// clean holds the active runs whose every step ran in this process
	// and stored nothing the retention sweep must remove (retention.go).
	cleanMu sync.Mutex
	clean   map[string]bool

	randMu sync.Mutex
	rand   *rand.Rand

	rt *runtime.Runtime
	q  *storage.Queue

	watchMu  sync.Mutex
	watchers map[string][]chan *runstate.Outcome

	// tracer is nil when tracing is off; runSpans are the spans of the
	// runs this process works, by run id (trace.go).
	tracer   trace.Tracer
	spanMu   sync.Mutex
	runSpans map[string]trace.Span
}

var (
	_ runtime.StepRunner     = (*Interpreter)(nil)
	_ runtime.TerminalHook   = (*Interpreter)(nil)
	_ runtime.RunEndObserver = (*Interpreter)(nil)
	_ runtime.RunRecordOwner = (*Interpreter)(nil)
)

// New returns an interpreter running workflows on q, with the runtime it
// runs in (Runtime) built from opts.Runtime, ready to submit runs and to
// work them (Runtime().Spawn). Definitions and large outputs live in
// store, the store q was opened on. Cost: that of runtime.New.
func New(q *storage.Queue, store objstore.Store, opts Options) (*Interpreter, error) {
	if q == nil || store == nil || opts.Actions == nil {
		return nil, errors.New("interpreter: New needs a queue, its store and an action registry")
	}
	if opts.Runtime.TerminalHook != nil {
		return nil, errors.New("interpreter: Options.Runtime.TerminalHook must be nil: the interpreter is its runtime's terminal hook")
	}
	opts.DSL = LoadOptions(opts.Actions, opts.DSL)
	// Requests made under a step's context count toward its run's totals.
	it := &Interpreter{View: newView(counting.Scoped(store), opts.DSL), acts: opts.Actions, getenv: opts.Getenv, clock: opts.Clock,
		log: opts.Logger, events: opts.Events, ended: opts.Ended, margin: opts.LeaseMargin, rand: opts.Rand, stepDurations: opts.StepDurations,
		retention: opts.Retention, sweepEvery: opts.SweepInterval,
		watchers: map[string][]chan *runstate.Outcome{}, clean: map[string]bool{}}
	if opts.TracerProvider != nil {
		it.tracer, it.runSpans = opts.TracerProvider.Tracer(tracerName), map[string]trace.Span{}
	}
	if it.retention < 0 || it.sweepEvery < 0 {
		return nil, errors.New("interpreter: Options.Retention and SweepInterval must not be negative")
	}
	if it.sweepEvery == 0 {
		it.sweepEvery = DefaultSweepInterval
	}
	switch {
	case opts.HistoryVisits == 0:
		it.historyVisits = DefaultHistoryVisits
	case opts.HistoryVisits > 0:
		it.historyVisits = opts.HistoryVisits
	}
	if it.getenv == nil {
		it.getenv = os.Getenv
	}
	if it.log == nil {
		it.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if it.margin <= 0 {
		it.margin = 30 * time.Second
	}
	if it.rand == nil {
		it.rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if it.clock == nil {
		it.clock = q.Clock()
	}
	ropts := opts.Runtime
	ropts.TerminalHook = it
	rt, err := runtime.New(q, store, it, ropts)
	if err != nil {
		return nil, err
	}
	it.rt, it.q = rt, q
	return it, nil
}

// Runtime returns the runtime the interpreter runs in.
func (it *Interpreter) Runtime() *runtime.Runtime { return it.rt }

func (it *Interpreter) now() time.Time {
	if it.clock == nil {
		return time.Now()
	}
	return it.clock.Now()
}

func (it *Interpreter) float() float64 {
	it.randMu.Lock()
	defer it.randMu.Unlock()
	return it.rand.Float64()
}

func (it *Interpreter) uuid() string {
	it.randMu.Lock()
	hi, lo := it.rand.Uint64(), it.rand.Uint64()
	it.randMu.Unlock()
	return formatUUID(hi, lo)
}

// formatUUID renders 128 random bits as a version 4 UUID.
func formatUUID(hi, lo uint64) string {
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, (hi>>16)&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}

func (it *Interpreter) emit(e Event) {
	if it.events != nil {
		it.events(e)
	}
}

// Event reports progress of a step, for a CLI to display.
type Event struct {
	Time    time.Time     `json:"time"`
	RunID   string        `json:"run"`
	Step    string        `json:"step"`
	Kind    string        `json:"event"` // "start" or "end"
	Attempt int           `json:"attempt"`
	Status  string        `json:"status,omitempty"` // end: see HistoryRecord.Outcome
	Elapsed time.Duration `json:"elapsed_ns,omitempty"`
	// Waited is the part of an end's Elapsed the step spent parked (a
	// wait_signal, sleep or call resumed), not working: metrics keep it
	// out of the step-duration buckets.
	Waited time.Duration  `json:"-"`
	Error  *dsl.ErrorInfo `json:"error,omitempty"`
	Next   string         `json:"next,omitempty"`
	// Job is the runtime job that carried the step; it settles after "end".
	Job string `json:"job,omitempty"`
	// Workflow, Action (the step's action, "" for other kinds; the
	// action of a foreach) and Number (the run's step number: 0 is its
	// first step) are for observers such as metrics; they are not part of
	// the --json event stream.
	Workflow string `json:"-"`
	Action   string `json:"-"`
	Number   int    `json:"-"`
	// Seq is the step's place among the DSL steps runtime step Number
	// ran (0: the first; pure steps that follow fold into it).
	Seq int `json:"-"`
	// LLM lists, on an "end" event, the model calls the attempt paid for
	// or replayed from its memo, as the step's output reports them.
	LLM []LLMUsage `json:"-"`
	// Vars are, on an "end" event, the run's variables after the step
	// (its set applied; secrets redacted), for test harnesses.
	Vars map[string]any `json:"-"`
}

// LLMUsage is one model call of a step, as its output reports it.
type LLMUsage struct {
	Model                          string
	PromptTokens, CompletionTokens int64
	// CostUSD is the call's cost; CostKnown is false when the model's
	// price is unknown.
	CostUSD   float64
	CostKnown bool
}

// StoreNamespaces are the object prefixes the interpreter writes under
// (definitions, large outputs, rerun claims), for runtime.Options.StoreNamespaces,
// so nothing else sharing the store is configured into them.
func StoreNamespaces() []objstore.Namespace {
	return []objstore.Namespace{
		{Owner: "interpreter definitions", Prefix: strings.TrimSuffix(defsPrefix, "/")},
		{Owner: "interpreter large outputs", Prefix: strings.TrimSuffix(outputsPrefix, "/")},
		{Owner: "interpreter rerun claims", Prefix: strings.TrimSuffix(rerunPrefix, "/")},
		{Owner: "interpreter shared answers", Prefix: strings.TrimSuffix(answersPrefix, "/")},
	}
}

// LoadOptions returns opts with acts' actions that are not built in added
// to ExtraActions (with the schemas they declare), for loading workflow
// files that use them (Load, dsl.Load).
func LoadOptions(acts *actions.Registry, opts dsl.Options) dsl.Options {
	if acts == nil {
		return opts
	}
	extra := acts.Schemas(dsl.BuiltinActions)
	if len(extra) == 0 {
		return opts
	}
	merged := make(map[string]json.RawMessage, len(extra)+len(opts.ExtraActions))
	for k, v := range extra {
		merged[k] = v
	}
	for k, v := range opts.ExtraActions {
		merged[k] = v
	}
	opts.ExtraActions = merged
	return opts
}
