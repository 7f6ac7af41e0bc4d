package actions

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrDuplicate is returned by Register when an action of that name is
// already registered.
var ErrDuplicate = errors.New("action already registered")

// Registry maps action names to actions. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	actions map[string]Action
}

// NewRegistry returns a registry holding the given actions, or an error if
// one is nil, has an empty name, or repeats a name.
func NewRegistry(actions ...Action) (*Registry, error) {
	r := &Registry{actions: make(map[string]Action, len(actions))}
	for _, a := range actions {
		if err := r.Register(a); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Register adds a. It fails with ErrDuplicate when the name is taken, so a
// custom action can never silently replace a built-in one.
func (r *Registry) Register(a Action) error {
	if a == nil {
		return errors.New("register action: nil action")
	}
	name := a.Name()
	if name == "" {
		return fmt.Errorf("register action %T: empty name", a)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.actions == nil {
		r.actions = make(map[string]Action)
	}
	if _, ok := r.actions[name]; ok {
		return fmt.Errorf("register action %q: %w; pick another name", name, ErrDuplicate)
	}
	r.actions[name] = a
	return nil
}

// Lookup returns the action registered under name.
func (r *Registry) Lookup(name string) (Action, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a, ok := r.actions[name]
	return a, ok
}

// Names returns the registered names in sorted order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.actions))
	for n := range r.actions {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// SchemaDeclarer is an Action that declares the JSON Schema of its with,
// so workflows that use it are checked at load (validate, the editor)
// and not only when the step runs. Registering such an action in the
// Registry is all an embedding program does: the interpreter hands the
// schema to the loader itself.
type SchemaDeclarer interface {
	Action
	// WithSchema returns the JSON Schema (2020-12) of the action's with;
	// nil accepts any map.
	WithSchema() json.RawMessage
}

// Schemas returns, for every registered action not named in builtin, the
// schema it declares (nil when it declares none), by name: the loader's
// dsl.Options.ExtraActions.
func (r *Registry) Schemas(builtin []string) map[string]json.RawMessage {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]json.RawMessage{}
	for name, a := range r.actions {
		if slices.Contains(builtin, name) {
			continue
		}
		var s json.RawMessage
		if d, ok := a.(SchemaDeclarer); ok {
			s = d.WithSchema()
		}
		out[name] = s
	}
	return out
}
