package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// A bad signal never fails a run. It is refused to its sender when the
// step that will consume it is known at send time (ValidateSignal, which
// the runtime calls before it buffers or delivers any signal, also through
// the inbox, and CheckSignal, which a process reading the store calls
// first); one that reaches the step anyway (buffered before the run was
// submitted, or checked against a schema that depends on the run's state)
// is set aside there: recorded as an OutcomeSignalRejected history record
// while the step waits on, for what is left of its timeout.
//
// A step's wait is known at send time from its wait record, tqw/wait/<key>:
// written when the step starts waiting and, for a wait_signal step whose
// `with` reads nothing but `input` and `run` (id, workflow, step), already
// in the run's submission (predictWaits), so a signal sent before the run
// reaches the step is checked too.

// headerSignalKeys is the run header listing, as a JSON array, the keys of
// the wait records predicted at submission; the run's end removes those
// still naming it.
const headerSignalKeys = "tqw.signal_keys"

// maxPredictedWaits bounds the wait records predicted for one run.
const maxPredictedWaits = 16

// maxRejectReason bounds the reason kept in a rejection record.
const maxRejectReason = 1024

// notAtSubmitRE matches the names an expression may read that are not
// known at submission (and $env, which reaches any of them). A match in
// any expression of a step's with keeps the step's wait unpredicted.
var notAtSubmitRE = regexp.MustCompile(`\$env|\b(?:vars|steps|output|error|item|index|secrets|now|uuid|attempt)\b`)

// predictWaits returns the wait records of the wait_signal steps of wf
// whose key and schema are known at submission, keyed by their KV key,
// and the header value listing their signal keys. A key that does not
// contain the run id is left out, since other runs could wait on it too.
func predictWaits(wf *dsl.Workflow, input any, runID string) (map[string][]byte, string, error) {
	records := map[string][]byte{}
	var keys []string
	for _, s := range wf.Steps {
		if len(keys) == maxPredictedWaits {
			break
		}
		if s.Kind != dsl.KindAction || s.Action != "wait_signal" || !knownAtSubmit(s.With) {
			continue
		}
		env := &dsl.Env{Input: input, Run: dsl.RunInfo{ID: runID, Workflow: wf.Name, Step: s.ID, Attempt: 1}}
		v, err := s.With.Eval(env)
		if err != nil {
			continue // the step reports it when it runs
		}
		p, err := plain(v)
		args, ok := p.(map[string]any)
		if err != nil || !ok {
			continue
		}
		key := runID + ":" + s.ID
		if k, ok := args["key"]; ok && k != nil {
			if key, ok = k.(string); !ok {
				continue
			}
		}
		if key == "" || len(key) > signal.MaxKeyLen || !strings.Contains(key, runID) {
			continue
		}
		if _, dup := records[waitKey(key)]; dup {
			continue
		}
		b, err := encodeMsgpack(&waitRecord{RunID: runID, Def: wf.Hash, Step: s.Index, Schema: args["schema"], Expected: true})
		if err != nil {
			return nil, "", err
		}
		if len(b) > storage.MaxKVValueSize {
			continue
		}
		records[waitKey(key)] = b
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, "", nil
	}
	h, err := json.Marshal(keys)
	if err != nil {
		return nil, "", err
	}
	return records, string(h), nil
}

// knownAtSubmit reports whether every expression of a with template reads
// only what is known when the run is submitted.
func knownAtSubmit(t *dsl.Template) bool {
	if t == nil {
		return true
	}
	for _, e := range t.Exprs() {
		if notAtSubmitRE.MatchString(e.Source) {
			return false
		}
	}
	return true
}

// predictedKeys returns the signal keys a run's headerSignalKeys lists.
func predictedKeys(headers map[string]string) []string {
	var keys []string
	if h := headers[headerSignalKeys]; h != "" {
		_ = json.Unmarshal([]byte(h), &keys) // a header that does not decode predicts nothing
	}
	return keys
}

// WaitingStep is what Waiting reports about the step waiting on a key.
type WaitingStep struct {
	RunID string
	// Key is the signal key.
	Key string
	// Workflow is the waiting run's definition; Step the waiting step.
	Workflow *dsl.Workflow
	Step     *dsl.Step
	// Schema is the JSON Schema the payload must satisfy; nil when none.
	Schema any
	// Expected is true when the run has not reached Step yet: its wait on
	// Key was predicted at submission.
	Expected bool
}

// InternalKey reports whether key is one the interpreter waits on itself
// (a call's child end, a parallel or map step's doorbell): only its own
// runs signal it, so no person or hook is asked for it.
func (v *View) InternalKey(key string) bool {
	return strings.HasPrefix(key, callPrefix) || strings.HasPrefix(key, doorbellPrefix)
}

// Waiting returns the step waiting on signal key, or about to (a wait
// predicted at submission), or nil when none is known.
func (v *View) Waiting(ctx context.Context, r Reader, key string) (*WaitingStep, error) {
	b, err := r.KVGet(ctx, waitKey(key))
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("interpreter: read waiter of %q: %w", key, err)
	}
	var w waitRecord
	if err := decodeMsgpack(b, &w); err != nil {
		return nil, err
	}
	d, err := v.definition(ctx, w.Def)
	if err != nil {
		return nil, err
	}
	s, err := stepAt(d.wf, w.Block, w.Step)
	if err != nil {
		return nil, fmt.Errorf("waiter of %q: %w", key, err)
	}
	return &WaitingStep{RunID: w.RunID, Key: key, Workflow: d.wf, Step: s, Schema: w.Schema, Expected: w.Expected}, nil
}

// CheckSignal checks payload (JSON; empty means null) for the wait_signal
// step known to consume signals on key (see Waiting), while its run is
// active. It returns nil when no such step is known (nothing can be
// checked) or the payload fits; an error wrapping signal.ErrRejected
// that names the step and what is wrong when the payload is not JSON or
// does not match the step's schema; another error when the store could not
// be read. It writes nothing. The run's activity is read when r is a
// runtime.StateReader (*storage.Queue, *storage.Reader); on another Reader a
// record its ended run left behind (until the run's end notification
// removes it) is checked as if the run were active.
func (v *View) CheckSignal(ctx context.Context, r Reader, key string, payload []byte) error {
	w, err := v.Waiting(ctx, r, key)
	if errors.Is(err, ErrCorruptState) || errors.Is(err, ErrDefinitionMissing) {
		// Nothing to check against: the step sets the payload aside
		// itself if it cannot use it.
		return nil
	}
	if err != nil || w == nil {
		return err
	}
	if sr, ok := r.(runtime.StateReader); ok {
		st, err := runtime.NewInspector(sr).Status(ctx, w.RunID)
		if errors.Is(err, runtime.ErrRunNotFound) || err == nil && st.State.Terminal() {
			return nil // a record of a run that ended
		}
		if err != nil {
			return fmt.Errorf("interpreter: status of run %s waiting on %q: %w", w.RunID, key, err)
		}
	}
	return w.Check(payload)
}

// ValidateSignal implements signal.Validator: CheckSignal on the
// runtime's queue. The runtime calls it before it buffers or
// delivers a signal, whoever sends it.
func (it *Interpreter) ValidateSignal(ctx context.Context, key string, payload []byte) error {
	return it.CheckSignal(ctx, it.q, key, payload)
}

var _ signal.Validator = (*Interpreter)(nil)

// Check validates a signal payload (JSON; empty means null) for the step;
// an error wraps signal.ErrRejected. A schema that does not compile
// checks nothing here: the step reports it when it runs.
//
// A schema mismatch keeps the *jsonschema.ValidationError in the error's
// chain, so dsl.InstancePointer locates the part of the payload at fault.
func (w *WaitingStep) Check(payload []byte) error {
	if _, problem, err := checkPayload(w.Schema, payload); err == nil && problem != nil {
		yet := ""
		if w.Expected {
			yet = ", which the run has not reached yet,"
		}
		return fmt.Errorf("%w: step %q of run %s%s cannot use it: %w", signal.ErrRejected, w.Step.ID, w.RunID, yet, problem)
	}
	return nil
}

// payloadProblem is why a signal payload cannot be used: its message,
// and the validation error behind it (if any).
type payloadProblem struct {
	msg   string
	cause error
}

func (p *payloadProblem) Error() string { return p.msg }
func (p *payloadProblem) Unwrap() error { return p.cause }

// checkPayload decodes a signal payload and checks it against schema (nil:
// any JSON value). It returns the decoded value or why the payload cannot
// be used, or an error when the schema itself does not compile.
func checkPayload(schema any, payload []byte) (v any, problem *payloadProblem, err error) {
	var sch *jsonschema.Schema
	if schema != nil {
		if sch, err = compileSchema(schema); err != nil {
			return nil, nil, err
		}
	}
	v, err = decodeSignalPayload(payload)
	if err != nil {
		return nil, &payloadProblem{msg: err.Error()}, nil
	}
	if sch == nil {
		return v, nil, nil
	}
	inst, err := jsonRoundTrip(v)
	if err != nil {
		return nil, &payloadProblem{msg: "the payload is not a JSON value: " + err.Error()}, nil
	}
	if verr := sch.Validate(inst); verr != nil {
		msg := oneLine(verr.Error())
		// Keep what is wrong where ("at '/approved': got string, want
		// boolean"), not the schema's internal name.
		if _, rest, ok := strings.Cut(msg, "; - "); ok {
			msg = strings.ReplaceAll(rest, "; - ", "; ")
		}
		return nil, &payloadProblem{msg: "the payload does not match the schema: " + msg, cause: verr}, nil
	}
	return v, nil, nil
}

// compileSchema compiles a wait_signal's with.schema (a plain value).
func compileSchema(schema any) (*jsonschema.Schema, error) {
	doc, err := jsonRoundTrip(schema)
	if err != nil {
		return nil, fmt.Errorf("argument \"schema\": %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("tqw:///signal.json", doc); err != nil {
		return nil, fmt.Errorf("argument \"schema\": %w", err)
	}
	sch, err := c.Compile("tqw:///signal.json")
	if err != nil {
		return nil, fmt.Errorf("argument \"schema\" does not compile: %s", oneLine(err.Error()))
	}
	return sch, nil
}

func decodeSignalPayload(payload []byte) (any, error) {
	if len(strings.TrimSpace(string(payload))) == 0 {
		return nil, nil
	}
	v, err := DecodeJSON(payload)
	if err != nil {
		return nil, fmt.Errorf("the signal payload is not JSON: %w", err)
	}
	return v, nil
}

// setAsideSignal records the signal the step just received as rejected
// for reason and waits again on the same key until the wait's original
// deadline.
func (x *exec) setAsideSignal(args map[string]any, reason string) (runtime.StepOutcome, error) {
	key := x.st.WaitKey
	reason = x.red.text(reason)
	if len(reason) > maxRejectReason {
		reason = strings.ToValidUTF8(reason[:maxRejectReason], "") + "…"
	}
	deadline := x.waitDeadline(args)
	remaining := max(deadline.Sub(x.it.now()), 0)
	payload, err := x.st.encode() // the same wait: phase, key, start and deadline
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	x.hist.Start = x.start.UnixMilli()
	x.hist.WaitKey, x.hist.Until = key, deadline.UnixMilli()
	x.hist.Rejected = &RejectedSignal{Key: key, Size: len(x.rs.Signal), Reason: reason}
	x.it.log.Warn("set aside a signal the waiting step cannot use; it waits on", "run", x.rs.RunID, "step", x.s.ID,
		"key", key, "size", len(x.rs.Signal), "reason", reason, "remaining", remaining)
	if err := x.finish(OutcomeSignalRejected, "", &dsl.ErrorInfo{Type: TypeSignalRejected, Message: reason}); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueOnSignal(payload, key, remaining), nil
}

// waitDeadline is when the current wait times out: the deadline set when
// it began or, for a wait begun by a version that did not record it, its
// start plus its timeout.
func (x *exec) waitDeadline(args map[string]any) time.Time {
	if x.st.Deadline > 0 {
		return time.UnixMilli(x.st.Deadline)
	}
	timeout, ok, e := durationArg(args, "timeout")
	if e != nil || !ok || x.st.Started == 0 {
		return x.it.now()
	}
	return time.UnixMilli(x.st.Started).Add(timeout)
}

// addPredictedWaits adds to spec, a run of wf whose first step payload is
// spec.Input, the wait records predicted for it and their header. The
// input is read back from the payload, so keys render exactly as the
// run's steps will render them.
func addPredictedWaits(spec *runtime.RunSpec, wf *dsl.Workflow) error {
	st, err := decodeState(spec.Input)
	if err != nil {
		return err
	}
	records, header, err := predictWaits(wf, st.Input, spec.RunID)
	if err != nil || header == "" {
		return err
	}
	if spec.KVWrites == nil {
		spec.KVWrites = map[string][]byte{}
	}
	for k, v := range records {
		spec.KVWrites[k] = v
	}
	if spec.Headers == nil {
		spec.Headers = map[string]string{}
	}
	spec.Headers[headerSignalKeys] = header
	return nil
}
