package engine

import (
	"fmt"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/actiondecl"
)

// ActionSummarizer is an Action that says in a sentence what it does;
// ActionDeclarations puts it in the declarations file for editors.
type ActionSummarizer interface {
	actions.Action
	Summary() string
}

// ActionDeclarations returns the declarations file of a program's own
// actions (the Options.Actions it registers): their names and with
// schemas (actions.SchemaDeclarer), for `tqw-dsl validate`, `lsp` and
// `schema` to check its workflows with (write it as tqw-actions.json
// beside them with File.Encode). No store is opened.
func ActionDeclarations(acts ...actions.Action) (*actiondecl.File, error) {
	reg, err := actions.NewRegistry()
	if err != nil {
		return nil, err
	}
	summaries := map[string]string{}
	for _, a := range acts {
		if err := reg.Register(a); err != nil {
			return nil, fmt.Errorf("engine: register action %q: %w", a.Name(), err)
		}
		if s, ok := a.(ActionSummarizer); ok {
			summaries[a.Name()] = s.Summary()
		}
	}
	f := actiondecl.New(reg.Schemas(dsl.BuiltinActions), summaries)
	b, err := f.Encode()
	if err != nil {
		return nil, err
	}
	// What validate will read must parse: a schema that does not compile
	// is the program's error, reported here rather than in an editor.
	return actiondecl.Parse("the program's actions", b)
}
