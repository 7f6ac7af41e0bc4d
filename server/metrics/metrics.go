package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tqw-dsl/tqw/internal/buildinfo"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// Metrics holds the metrics of one serving process and the hooks that
// feed them. Create it with New, wire its hooks (Events, WrapStore,
// InboxAnswered, Watch), and serve Handler at /metrics. It is safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted   *prometheus.CounterVec
	runsFinished  *prometheus.CounterVec
	stepAttempts  *prometheus.CounterVec
	stepDuration  *prometheus.HistogramVec
	stepWait      *prometheus.HistogramVec
	storeRequests *prometheus.CounterVec
	storeDuration *prometheus.HistogramVec
	llmTokens     *prometheus.CounterVec
	llmCost       *prometheus.CounterVec
	llmUnpriced   *prometheus.CounterVec
	commands      *prometheus.CounterVec
	signalLatency *prometheus.HistogramVec
	http          httpMetrics
}

// Step and request durations span a millisecond (a memo hit, a local
// PUT) to minutes (an LLM call, a shell script).
var (
	stepBuckets    = prometheus.ExponentialBuckets(0.001, 4, 10)  // 1 ms .. 262 s
	waitBuckets    = prometheus.ExponentialBuckets(1, 4, 12)      // 1 s .. 48 days
	requestBuckets = prometheus.ExponentialBuckets(0.0005, 2, 15) // 0.5 ms .. 8 s
	signalBuckets  = prometheus.ExponentialBuckets(0.01, 2, 12)   // 10 ms .. 20 s
)

// New returns metrics registered on a registry of their own, with the Go
// runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_runs_started_total", Help: "Runs whose first step started, by workflow.",
		}, []string{"workflow"}),
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_runs_finished_total", Help: "Runs that ended, by workflow and outcome (succeeded, failed, cancelled).",
		}, []string{"workflow", "outcome"}),
		stepAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_step_attempts_total", Help: "Step attempts that ended, durably, by workflow, step, action and outcome (the history outcome: ok, succeeded, failed, caught, retry, waiting, ...).",
		}, []string{"workflow", "step", "action", "outcome"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tqw_step_duration_seconds", Help: "Working time of step attempts, by workflow, step, action and outcome; the time a step spent parked (wait_signal, sleep, call) is in tqw_step_wait_seconds.", Buckets: stepBuckets,
		}, []string{"workflow", "step", "action", "outcome"}),
		stepWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tqw_step_wait_seconds", Help: "Time steps spent parked before they resumed (a wait_signal until its signal, a sleep, a call until its child run ended), by workflow, step and action.", Buckets: waitBuckets,
		}, []string{"workflow", "step", "action"}),
		storeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_objstore_requests_total", Help: "Object-store requests, by op (get, put, delete, head, list) and outcome (ok, not_found, precondition_failed, error).",
		}, []string{"op", "outcome"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tqw_objstore_request_duration_seconds", Help: "Object-store request latency, by op.", Buckets: requestBuckets,
		}, []string{"op"}),
		llmTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_llm_tokens_total", Help: "LLM tokens of the model calls steps made or replayed, by model and kind (prompt, completion).",
		}, []string{"model", "kind"}),
		llmCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_llm_cost_usd_total", Help: "Cost in US dollars of the model calls with a known price, by model.",
		}, []string{"model"}),
		llmUnpriced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_llm_unpriced_calls_total", Help: "Model calls whose price is unknown (not in tqw_llm_cost_usd_total), by model.",
		}, []string{"model"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_inbox_commands_total", Help: "Commands of other processes the writer answered through the store inbox, by kind and outcome (ok or the rejection's code).",
		}, []string{"kind", "outcome"}),
		signalLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tqw_signal_delivery_latency_seconds", Help: "Time from a client sending a signal to the writer answering it (signal applied), by path: inbox (across the clocks of two processes), http (from the request's arrival).", Buckets: signalBuckets,
		}, []string{"path"}),
		http: newHTTPMetrics(),
	}
	m.reg.MustRegister(m.runsStarted, m.runsFinished, m.stepAttempts, m.stepDuration, m.stepWait, m.storeRequests, m.storeDuration,
		m.llmTokens, m.llmCost, m.llmUnpriced, m.commands, m.signalLatency, buildInfoGauge(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.http.register(m.reg)
	return m
}

// buildInfoGauge is tqw_build_info: 1, labelled with the binary's build.
func buildInfoGauge() prometheus.Collector {
	in, _ := buildinfo.Read()
	known := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tqw_build_info", Help: "The build of this process (always 1): module version, VCS revision and Go toolchain, as tqw-dsl --version prints them.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(known(in.Version), known(in.Revision), known(in.GoVersion)).Set(1)
	return g
}

// Handler serves the metrics in the Prometheus text (or protobuf)
// exposition format. A gauge source that fails is reported in the
// response as an error, the other metrics still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is where the metrics are registered, for tests and for adding
// collectors of one's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Events observes the interpreter's step events (interpreter.Options.Events);
// chain it with other observers. It never blocks.
func (m *Metrics) Events(e interpreter.Event) {
	wf := e.Workflow
	switch e.Kind {
	case "start":
		// The run's first DSL step: pure steps after it share Number 0.
		if e.Number == 0 && e.Seq == 0 && e.Attempt == 1 {
			m.runsStarted.WithLabelValues(wf).Inc()
		}
	case "end":
		outcome := e.Status
		if outcome == "" {
			outcome = "unknown"
		}
		m.stepAttempts.WithLabelValues(wf, e.Step, e.Action, outcome).Inc()
		// A resumed wait's days parked are not the step's work.
		m.stepDuration.WithLabelValues(wf, e.Step, e.Action, outcome).Observe(max(e.Elapsed-e.Waited, 0).Seconds())
		if e.Waited > 0 {
			m.stepWait.WithLabelValues(wf, e.Step, e.Action).Observe(e.Waited.Seconds())
		}
		// Runs that did not succeed are counted by RunEnded, which sees
		// those ended from outside (cancelled) too.
		if outcome == interpreter.OutcomeSucceeded {
			m.runsFinished.WithLabelValues(wf, outcome).Inc()
		}
		for _, u := range e.LLM {
			model := u.Model
			if model == "" {
				model = "unknown"
			}
			m.llmTokens.WithLabelValues(model, "prompt").Add(float64(u.PromptTokens))
			m.llmTokens.WithLabelValues(model, "completion").Add(float64(u.CompletionTokens))
			if u.CostKnown {
				m.llmCost.WithLabelValues(model).Add(u.CostUSD)
			} else {
				m.llmUnpriced.WithLabelValues(model).Inc()
			}
		}
	}
}

// RunEnded observes the runs that did not succeed
// (interpreter.Options.Ended): tqw_runs_finished_total counts them by
// outcome (failed, cancelled), as Events counts those that succeeded.
func (m *Metrics) RunEnded(o *runstate.Outcome) {
	wf := o.Headers[interpreter.HeaderWorkflow]
	m.runsFinished.WithLabelValues(wf, o.Status.String()).Inc()
}

// InboxAnswered observes the commands the writer answers
// (remote.InboxOptions.OnAnswered).
func (m *Metrics) InboxAnswered(a remote.Answered) {
	outcome := a.Code
	if outcome == "" {
		outcome = "ok"
	}
	m.commands.WithLabelValues(string(a.Kind), outcome).Inc()
	if a.Kind == remote.CommandSignal && a.Code == "" && !a.SentAt.IsZero() {
		m.ObserveSignalDelivery("inbox", a.AnsweredAt.Sub(a.SentAt))
	}
}

// ObserveSignalDelivery records the latency of one signal delivered
// through path ("inbox", "http"). A negative latency (clock skew between
// sender and writer) counts as zero.
func (m *Metrics) ObserveSignalDelivery(path string, d time.Duration) {
	m.signalLatency.WithLabelValues(path).Observe(max(d, 0).Seconds())
}
