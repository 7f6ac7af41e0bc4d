package interpreter

import (
	"context"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/interpreter/tracing"
	"github.com/tqw-dsl/tqw/runtime"
)

// Attributes of the interpreter's spans. Values come from the run's
// records; inputs, outputs and headers are never recorded.
const (
	AttrRunID      = attribute.Key("tqw.run.id")
	AttrWorkflow   = attribute.Key("tqw.workflow")
	AttrStep       = attribute.Key("tqw.step")
	AttrStepNumber = attribute.Key("tqw.step.number")
	AttrAction     = attribute.Key("tqw.action")
	AttrAttempt    = attribute.Key("tqw.attempt")
	// AttrOutcome is the attempt's history outcome (OutcomeOK, ...), or
	// "error" when the step returned an error the runtime retries.
	AttrOutcome = attribute.Key("tqw.outcome")
	// AttrRunStatus is the run's end (succeeded, failed, cancelled).
	AttrRunStatus = attribute.Key("tqw.run.status")
	// AttrRunReleased marks a run span ended because this process gave
	// the run up (shutdown) before it ended.
	AttrRunReleased = attribute.Key("tqw.run.released")
)

// tracerName is the instrumentation scope of the interpreter's spans.
const tracerName = "github.com/tqw-dsl/tqw/interpreter"

// outcomeError is AttrOutcome of a delivery that returned an error.
const outcomeError = "error"

// traceCarrier is the one-field carrier of HeaderTraceParent.
type traceCarrier struct{ traceparent *string }

func (c traceCarrier) Get(key string) string {
	if key == "traceparent" {
		return *c.traceparent
	}
	return ""
}

func (c traceCarrier) Set(key, value string) {
	if key == "traceparent" {
		*c.traceparent = value
	}
}

func (c traceCarrier) Keys() []string { return []string{"traceparent"} }

// stampTrace records the span of ctx, if any, as the run's parent trace.
func stampTrace(ctx context.Context, spec *runtime.RunSpec) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	var tp string
	propagation.TraceContext{}.Inject(ctx, traceCarrier{&tp})
	if tp != "" {
		spec.Headers[HeaderTraceParent] = tp
	}
}

// startSubmitSpan starts the span of a submission; nil when tracing is off.
func (it *Interpreter) startSubmitSpan(ctx context.Context, w *Workflow) (context.Context, trace.Span) {
	if it.tracer == nil {
		return ctx, nil
	}
	return it.tracer.Start(ctx, "submit "+w.Main.Name, trace.WithAttributes(AttrWorkflow.String(w.Main.Name)))
}

// endSubmitSpan ends a submission's span.
func endSubmitSpan(span trace.Span, out runtime.SubmitOutcome, err error) {
	if span == nil {
		return
	}
	if out.RunID != "" {
		span.SetAttributes(AttrRunID.String(out.RunID))
	}
	if err != nil {
		// Submission errors name the run and the condition, not the input.
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// runSpan returns ctx with the span of rs's run in this process, started
// by the first step the process runs for the run, as a child of the
// submitter's span (HeaderTraceParent) when the run has one.
func (it *Interpreter) runSpan(ctx context.Context, rs *runtime.Step) context.Context {
	it.spanMu.Lock()
	defer it.spanMu.Unlock()
	if span, ok := it.runSpans[rs.RunID]; ok {
		return trace.ContextWithSpan(ctx, span)
	}
	parent := ctx
	if tp := rs.Headers[HeaderTraceParent]; tp != "" {
		parent = propagation.TraceContext{}.Extract(ctx, traceCarrier{&tp})
	}
	wf := rs.Headers[HeaderWorkflow]
	name := "run"
	if wf != "" {
		name += " " + wf
	}
	_, span := it.tracer.Start(parent, name, trace.WithAttributes(AttrRunID.String(rs.RunID), AttrWorkflow.String(wf)))
	it.runSpans[rs.RunID] = span
	return trace.ContextWithSpan(ctx, span)
}

// endRunSpan ends the span of a run that ended, if this process has one.
func (it *Interpreter) endRunSpan(o *runstate.Outcome) {
	if it.tracer == nil {
		return
	}
	it.spanMu.Lock()
	span, ok := it.runSpans[o.RunID]
	delete(it.runSpans, o.RunID)
	it.spanMu.Unlock()
	if !ok {
		return
	}
	span.SetAttributes(AttrRunStatus.String(o.Status.String()))
	if o.Status != runstate.Succeeded {
		// The reason as the run's record stores it: redacted.
		span.SetStatus(codes.Error, o.Error)
	}
	span.End()
}

// EndRunSpans ends the spans of the runs this process worked that have
// not ended, marked AttrRunReleased: call it when the process gives its
// runs up (after the worker stopped), before flushing the spans. A run
// this process works again later gets a new span.
func (it *Interpreter) EndRunSpans() {
	if it.tracer == nil {
		return
	}
	it.spanMu.Lock()
	spans := it.runSpans
	it.runSpans = map[string]trace.Span{}
	it.spanMu.Unlock()
	for _, span := range spans {
		span.SetAttributes(AttrRunReleased.Bool(true))
		span.End()
	}
}

// traceStep runs x's step, as a child span of its run's when tracing is
// on: one span per DSL step, so the steps of one delivery (fold.go) get
// one each.
func (it *Interpreter) traceStep(ctx context.Context, x *exec) (runtime.StepOutcome, error) {
	if it.tracer == nil {
		return x.runOne(ctx)
	}
	ctx, span := it.startStepSpan(ctx, x.rs)
	defer span.End()
	out, err := x.runOne(ctx)
	if x.s != nil {
		span.SetName("step " + x.s.ID)
		span.SetAttributes(AttrStep.String(x.s.ID), AttrAttempt.Int(x.hist.Attempt))
		if a := stepAction(x.s); a != "" {
			span.SetAttributes(AttrAction.String(a))
		}
	}
	switch {
	case err != nil:
		span.SetAttributes(AttrOutcome.String(outcomeError))
		// runOne redacted the error already.
		span.SetStatus(codes.Error, err.Error())
	case x.hist.Outcome != "":
		span.SetAttributes(AttrOutcome.String(x.hist.Outcome))
		if e := x.hist.Error; e != nil {
			// The error as the history stores it: redacted.
			span.SetStatus(codes.Error, e.Type+": "+e.Message)
		}
	}
	return out, err
}

// traceUnstarted records a delivery that ended before its DSL step (its
// state or definition unreadable, its run id reused) as a step span.
func (it *Interpreter) traceUnstarted(ctx context.Context, rs *runtime.Step, err error) {
	if it.tracer == nil {
		return
	}
	_, span := it.startStepSpan(ctx, rs)
	if err != nil {
		span.SetAttributes(AttrOutcome.String(outcomeError))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (it *Interpreter) startStepSpan(ctx context.Context, rs *runtime.Step) (context.Context, trace.Span) {
	return it.tracer.Start(ctx, "step", trace.WithAttributes(AttrRunID.String(rs.RunID),
		AttrWorkflow.String(rs.Headers[HeaderWorkflow]), AttrStepNumber.Int(rs.Number)))
}

// actionContext returns the context an action runs in: with tracing on,
// it carries the step's secret redaction for the HTTP client spans.
func (x *exec) actionContext(ctx context.Context) context.Context {
	if x.it.tracer == nil {
		return ctx
	}
	return tracing.WithRedaction(ctx, x.red.text)
}
