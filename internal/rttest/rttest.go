package rttest

import (
	"fmt"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/queuetest"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// OpenFunc opens the runtime under test on q and store: runtime.New, or
// an add-on's New that opens one (it may keep the add-on's runner).
type OpenFunc func(q *queue.Queue, store objstore.Store) (*runtime.Runtime, error)

// Runtime returns an OpenFunc of runtime.New with runner, a quiet logger,
// no shutdown grace period unless opts (at most one) set them.
func Runtime(runner runtime.StepRunner, opts ...runtime.Options) OpenFunc {
	o := one(opts)
	if o.Logger == nil {
		o.Logger = queuetest.Quiet()
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = -1
	}
	return func(q *queue.Queue, store objstore.Store) (*runtime.Runtime, error) {
		return runtime.New(q, store, runner, o)
	}
}

// one returns the Options a helper was given: none or one, so a call
// site reads like runtime.New's.
func one(opts []runtime.Options) runtime.Options {
	switch len(opts) {
	case 0:
		return runtime.Options{}
	case 1:
		return opts[0]
	}
	panic("rttest: more than one runtime.Options")
}

// Env is a queuetest.Env with a runtime on its queue and, once started, a
// worker.
type Env struct {
	*queuetest.Env
	open OpenFunc
	// RT is the open runtime, nil after Close.
	RT *runtime.Runtime
	// W is the running worker, nil before Start and after Stop.
	W *runtime.Worker
}

// New returns a queuetest.New env, each adjust applied before its queue
// opens, with a runtime opened by open on it. The worker is stopped and
// the queue closed when the test ends.
func New(t testing.TB, open OpenFunc, adjust ...func(*queuetest.Env)) *Env {
	t.Helper()
	e := &Env{Env: queuetest.New(t, adjust...), open: open}
	e.openRuntime()
	t.Cleanup(e.Stop) // before queuetest's cleanup closes the queue
	return e
}

func (e *Env) openRuntime() {
	e.T.Helper()
	rt, err := e.open(e.Q, e.Store)
	if err != nil {
		e.T.Fatalf("open the runtime: %v", err)
	}
	e.RT = rt
}

// Open opens a new queue and runtime on the same store, without closing
// the current ones: a second process, or a restart after a crash (the new
// queue fences the old one).
func (e *Env) Open() {
	e.T.Helper()
	e.OpenQueue()
	e.openRuntime()
}

// Start starts the worker.
func (e *Env) Start() {
	e.T.Helper()
	if e.W != nil {
		e.T.Fatal("worker already started")
	}
	e.W = e.RT.Spawn(e.Ctx)
}

// Stop shuts the worker down, if started, and fails the test when it
// stopped with an error.
func (e *Env) Stop() {
	e.T.Helper()
	if e.W == nil {
		return
	}
	err := e.W.Shutdown(e.Ctx)
	e.W = nil
	if err != nil {
		e.T.Errorf("worker shutdown: %v", err)
	}
}

// Close stops the worker and closes the queue (a runtime holds nothing to
// close of its own).
func (e *Env) Close() {
	e.T.Helper()
	e.Stop()
	e.CloseQueue()
	e.RT = nil
}

// Reopen closes everything and opens a fresh queue and runtime on the
// same store: a clean restart.
func (e *Env) Reopen() {
	e.T.Helper()
	e.Close()
	e.Open()
}

// Submit submits spec, failing the test on an error.
func (e *Env) Submit(spec runtime.RunSpec) runtime.SubmitOutcome {
	e.T.Helper()
	out, err := e.RT.Submit(e.Ctx, spec)
	if err != nil {
		e.T.Fatalf("Submit(%q): %v", spec.RunID, err)
	}
	return out
}

// Status returns the status of run id, failing the test on an error.
func (e *Env) Status(id string) runstate.Status {
	e.T.Helper()
	st, err := e.RT.Status(e.Ctx, id)
	if err != nil {
		e.T.Fatalf("Status(%s): %v", id, err)
	}
	return st
}

// WaitRun yields until the status of run id satisfies ok, and returns it.
// It does not move the clock.
func (e *Env) WaitRun(id string, ok func(runstate.Status) bool) runstate.Status {
	e.T.Helper()
	var st runstate.Status
	var err error
	e.Until(func() bool {
		st, err = e.RT.Status(e.Ctx, id)
		return err == nil && ok(st)
	}, func() string {
		return fmt.Sprintf("run %s never reached the expected state (last %+v, err %v)", id, st, err)
	})
	return st
}

// Terminated waits until every run in ids is terminal.
func (e *Env) Terminated(ids ...string) {
	e.T.Helper()
	for _, id := range ids {
		e.WaitRun(id, func(st runstate.Status) bool { return st.State.Terminal() })
	}
}
