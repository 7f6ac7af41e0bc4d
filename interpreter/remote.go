package interpreter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
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
// id writes nothing. Cost: one HEAD per definition in the call tree, plus
// one create-only PUT for each the store does not hold yet; the reuse
// check reads r's memory only.
func PrepareRun(ctx context.Context, store objstore.Store, r runtime.StateReader, w *Workflow, input any, runID string, opts ...SubmitOption) (runtime.RunSpec, error) {
	return prepareRun(ctx, store, nil, nil, r, w, input, runID, opts...)
}

// prepareRun is PrepareRun with the set of definitions known stored
// (nil: none known) and the runtime owning r (nil: none known).
func prepareRun(ctx context.Context, store objstore.Store, pins *pinSet, rt *runtime.Runtime, r runtime.StateReader, w *Workflow, input any, runID string, opts ...SubmitOption) (runtime.RunSpec, error) {
	p, err := plain(input)
	if err != nil {
		return runtime.RunSpec{}, fmt.Errorf("%w: %v", dsl.ErrInputInvalid, err)
	}
	if err := checkInputSize(p); err != nil {
		return runtime.RunSpec{}, err
	}
	if err := validateInput(w.Main, p); err != nil {
		return runtime.RunSpec{}, err
	}
	if runID != "" {
		if err := runstate.ValidateRunID(runID); err != nil {
			return runtime.RunSpec{}, err
		}
		if r != nil {
			insp := runtime.NewInspector(r)
			if rt != nil && runtime.StateReader(rt.Queue()) == r {
				insp = rt.Inspector()
			}
			if err := checkReuse(ctx, insp, r, runID); err != nil {
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
	spec := runtime.RunSpec{RunID: runID, Input: payload, Headers: map[string]string{HeaderWorkflow: w.Main.Name, HeaderDefinition: w.pin.Hash},
		Labels: map[string]string{LabelWorkflow: w.Main.Name}, CancelHandlers: hasHandlers(w.Main)}
	if err := addPredictedWaits(&spec, w.Main); err != nil {
		return runtime.RunSpec{}, err
	}
	if err := applyOptions(&spec, w.Main, p, opts); err != nil {
		return runtime.RunSpec{}, err
	}
	// Last: a refused submission writes nothing.
	if err := pinDefinitions(ctx, store, pins, w); err != nil {
		return runtime.RunSpec{}, err
	}
	stampTrace(ctx, &spec)
	return spec, nil
}

// SubmitOption adjusts a submission (Submit, PrepareRun).
type SubmitOption func(*runtime.RunSpec)

// WithRunKey tags the run with the run key (RunKey) of the command that
// submits it, so the retention sweep removes the command's claim object.
func WithRunKey(key string) SubmitOption {
	return func(s *runtime.RunSpec) { s.Headers[headerRunKey] = key }
}

// WithLabels adds labels to the run (runtime.RunSpec.Labels), to list it
// by (runstate.ListOptions.Labels). LabelWorkflow stays the workflow's
// name: a label of that key is ignored. Check them with
// runstate.ValidateLabels first.
func WithLabels(labels map[string]string) SubmitOption {
	return func(s *runtime.RunSpec) {
		for k, v := range labels {
			if k != LabelWorkflow {
				s.Labels[k] = v
			}
		}
	}
}

// applyOptions adds wf's labels: (evaluated on input, plain values) to
// spec, then applies opts, whose labels (WithLabels) win on a key, and
// checks the labels the run then carries.
func applyOptions(spec *runtime.RunSpec, wf *dsl.Workflow, input any, opts []SubmitOption) error {
	if err := addDeclaredLabels(spec, wf, input); err != nil {
		return err
	}
	for _, o := range opts {
		o(spec)
	}
	if err := runstate.ValidateLabels(spec.Labels); err != nil {
		return fmt.Errorf("run %s: %w", spec.RunID, err)
	}
	return nil
}

// CheckLabels checks, without a store, the labels a run of w on input
// under runID would carry: the file's labels: evaluated on the input and
// labels (a submission's, as WithLabels gives them). The error is
// Submit's, matching runstate.ErrInvalidLabel (or dsl.ErrInputInvalid
// for an input that is no JSON value), so a command refuses a run
// before it opens the store.
func (w *Workflow) CheckLabels(input any, runID string, labels map[string]string) error {
	p, err := plain(input)
	if err != nil {
		return fmt.Errorf("%w: %v", dsl.ErrInputInvalid, err)
	}
	spec := runtime.RunSpec{RunID: runID, Headers: map[string]string{}, Labels: map[string]string{LabelWorkflow: w.Main.Name}}
	return applyOptions(&spec, w.Main, p, []SubmitOption{WithLabels(labels)})
}

// addDeclaredLabels adds wf's labels: (declaredLabels) for spec's run.
func addDeclaredLabels(spec *runtime.RunSpec, wf *dsl.Workflow, input any) error {
	labels, err := declaredLabels(wf, input, spec.RunID)
	if err != nil {
		return err
	}
	maps.Copy(spec.Labels, labels)
	return nil
}

// pinDefinitions makes sure the store holds every definition of w. A
// definition in pins is known stored and costs nothing; any other costs a
// HEAD, and a create-only PUT when the store lacks it (a racing writer of
// the same hash wrote the same bytes, so losing the race is success).
// Concurrent pins of one hash through one set wait for the first one's
// requests instead of making their own. Definitions are never deleted,
// so once stored a hash stays known.
func pinDefinitions(ctx context.Context, store objstore.Store, pins *pinSet, w *Workflow) error {
	for hash, wf := range w.all {
		err := pins.pin(ctx, hash, func() error { return putDefinition(ctx, store, hash, wf.Source) })
		if err != nil {
			return fmt.Errorf("interpreter: store definition of %s: %w", wf.File, err)
		}
	}
	return nil
}

// putDefinition stores src as the definition hash unless the store holds
// it (a HEAD, then a create-only PUT: a racing writer of the same hash
// wrote the same bytes).
func putDefinition(ctx context.Context, store objstore.Store, hash string, src []byte) error {
	_, err := store.Head(ctx, defKey(hash))
	if errors.Is(err, objstore.ErrNotExist) {
		_, err = store.Put(ctx, defKey(hash), src, objstore.CreateOnly())
		if errors.Is(err, objstore.ErrPrecondition) {
			err = nil
		}
	}
	return err
}

// pinSet holds the hashes of definitions known to be in the store; the
// nil set knows none. Safe for concurrent use.
type pinSet struct {
	mu sync.Mutex
	// hashes is bounded (maxPinned, least recently used forgotten first):
	// a forgotten hash costs one HEAD on its next pin.
	hashes  *lru.Cache[string, struct{}]
	pending map[string]chan struct{} // hashes being stored; closed when done
}

// maxPinned is how many stored definition hashes a pinSet remembers.
const maxPinned = 16384

// remember records hash as stored; p.mu is held.
func (p *pinSet) remember(hash string) {
	if p.hashes == nil {
		p.hashes, _ = lru.New[string, struct{}](maxPinned)
	}
	p.hashes.Add(hash, struct{}{})
}

// known reports whether hash is remembered stored; p.mu is held.
func (p *pinSet) known(hash string) bool {
	return p.hashes != nil && p.hashes.Contains(hash)
}

// pin runs store unless hash is known stored or another pin of it is
// under way, in which case it waits for that one (and runs store itself
// if that one failed). hash is known stored once store succeeded.
func (p *pinSet) pin(ctx context.Context, hash string, store func() error) error {
	if p == nil {
		return store()
	}
	for {
		p.mu.Lock()
		if p.known(hash) {
			p.mu.Unlock()
			return nil
		}
		if done, ok := p.pending[hash]; ok {
			p.mu.Unlock()
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done := make(chan struct{})
		if p.pending == nil {
			p.pending = map[string]chan struct{}{}
		}
		p.pending[hash] = done
		p.mu.Unlock()
		err := store()
		p.mu.Lock()
		delete(p.pending, hash)
		if err == nil {
			p.remember(hash)
		}
		p.mu.Unlock()
		close(done)
		return err
	}
}

func (p *pinSet) add(hash string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remember(hash)
}
