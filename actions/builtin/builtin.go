package builtin

import (
	nethttp "net/http"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/http"
	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/actions/shell"
)

// Options configure the built-in actions.
type Options struct {
	// HTTPClient is used by http and llm unless their own options set a
	// client; nil means each uses a client with Go's default transport.
	HTTPClient *nethttp.Client
	// HTTP configures the http action.
	HTTP http.Options
	// LLM configures the llm action (base URL, price table, timeout).
	LLM llm.Options
	// EnableShell adds the shell action; false leaves it out, so Lookup("shell")
	// reports not found (the CLI's --no-shell).
	EnableShell bool
	// Shell configures the shell action (working dir, environment, caps).
	Shell shell.Options
}

// New returns a registry holding the built-in actions configured by opts.
func New(opts Options) *actions.Registry {
	if opts.HTTP.Client == nil {
		opts.HTTP.Client = opts.HTTPClient
	}
	if opts.LLM.Client == nil {
		opts.LLM.Client = opts.HTTPClient
	}
	list := []actions.Action{http.New(opts.HTTP), llm.New(opts.LLM)}
	if opts.EnableShell {
		list = append(list, shell.New(opts.Shell))
	}
	r, err := actions.NewRegistry(list...)
	if err != nil {
		// The built-in names are distinct constants; reaching this is a bug here.
		panic("builtin: " + err.Error())
	}
	return r
}
