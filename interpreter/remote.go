package interpreter

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// PrepareRun is Submit for a process that is not the store's writer: it
// validates input against w's input schema, pins w and every workflow it
// calls in store, and returns the RunSpec Submit would submit, for a
// remote.Client (runtime/remote) to send to the writer's inbox. The
// definitions are plain create-only objects under tqw/defs/, not kv
// state, so writing them from any process is safe and disturbs no writer. Submit builds its spec
// here, so submitting the same run id and input through either path is
// the same submission.
//
// With r (a queue.Reader on the store, refreshed by the caller) a runID
// that names a finished run still retained is refused with
// ErrRunIDReused, as Submit refuses it. r may lag the writer: a run that
// finishes between this check and the writer applying the submission is
// not caught here and fails at its first step instead. A nil r skips the
// check.
//
// An empty runID is replaced by a fresh ULID. The spec carries the wait
// records of the wait_signal steps whose key and schema are known at
// submission (see ValidateSignal), so a signal sent before the run
// reaches such a step is checked against its schema.
//
// An invalid input (errors.Is(err, dsl.ErrInputInvalid)), workflow or run
// id writes nothing. Cost: one create-only PUT per definition in the call
// tree; the reuse check reads r's memory only.
func PrepareRun(ctx context.Context, store objstore.Store, r runtime.StateReader, w *Workflow, input any, runID string, opts ...SubmitOption) (runtime.RunSpec, error) {
	p, err := plain(input)
	if err != nil {
		return runtime.RunSpec{}, fmt.Errorf("%w: %v", dsl.ErrInputInvalid, err)
	}
	if err := validateInput(w.Main, p); err != nil {
		return runtime.RunSpec{}, err
	}
	if runID != "" {
		if err := runtime.ValidateRunID(runID); err != nil {
			return runtime.RunSpec{}, err
		}
		if r != nil {
			if err := checkReuse(ctx, r, runID); err != nil {
				return runtime.RunSpec{}, err
			}
		}
	}
	if runID == "" {
		// Chosen here rather than by the runtime, so the records that
		// name the run (predicted waits) ride its submission.
		runID = ulid.Make().String()
	}
	st := &state{V: stateVersion, Def: w.pin.Hash, Input: p}
	if len(w.pin.Calls) > 0 {
		st.Pin = w.pin
	}
	payload, err := st.encode()
	if err != nil {
		return runtime.RunSpec{}, err
	}
	if err := pinDefinitions(ctx, store, w); err != nil {
		return runtime.RunSpec{}, err
	}
	spec := runtime.RunSpec{RunID: runID, Input: payload, Headers: map[string]string{HeaderWorkflow: w.Main.Name, HeaderDefinition: w.pin.Hash}}
	if err := addPredictedWaits(&spec, w.Main); err != nil {
		return runtime.RunSpec{}, err
	}
	for _, o := range opts {
		o(&spec)
	}
	return spec, nil
}

// SubmitOption adjusts a submission (Submit, PrepareRun).
type SubmitOption func(*runtime.RunSpec)

// WithRunKey tags the run with the run key (RunKey) of the command that
// submits it, so the retention sweep removes the command's claim object.
func WithRunKey(key string) SubmitOption {
	return func(s *runtime.RunSpec) { s.Headers[HeaderRunKey] = key }
}

// pinDefinitions writes every definition of w create-only; one already
// there (same hash, hence same bytes) is kept.
func pinDefinitions(ctx context.Context, store objstore.Store, w *Workflow) error {
	for hash, wf := range w.all {
		_, err := store.Put(ctx, defKey(hash), wf.Source, objstore.CreateOnly())
		if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
			return fmt.Errorf("interpreter: store definition of %s: %w", wf.File, err)
		}
	}
	return nil
}
