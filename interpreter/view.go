package interpreter

import (
	"errors"
	"sync"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// View reads what the interpreter keeps in a store without running
// anything: the workflow definitions runs are pinned to (Definition),
// where an active run stands (Position), and the step waiting on a
// signal (Waiting, CheckSignal). A process that reads a store another
// process writes uses a View; an Interpreter is one too. Safe for
// concurrent use.
type View struct {
	store   objstore.Store
	dslOpts dsl.Options

	defMu sync.Mutex
	defs  map[string]*definition
	// pins are the definitions known stored: Submit pins each once.
	pins pinSet
}

// NewView returns a view of the definitions in store, parsed knowing the
// registry's actions. Cost: nothing until a method reads the store.
func NewView(store objstore.Store, acts *actions.Registry) (*View, error) {
	if store == nil || acts == nil {
		return nil, errors.New("interpreter: NewView needs a store and an action registry")
	}
	return newView(store, LoadOptions(acts, dsl.Options{})), nil
}

func newView(store objstore.Store, load dsl.Options) *View {
	return &View{store: store, dslOpts: load, defs: map[string]*definition{}}
}
