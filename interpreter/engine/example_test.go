package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/interpreter/engine"
)

// shout is a custom action: its with schema is declared once, with the action.
type shout struct{}

func (shout) Name() string { return "shout" }

func (shout) WithSchema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`)
}

func (shout) Execute(_ context.Context, c *actions.Call) (any, error) {
	text, _ := c.Args["text"].(string)
	return map[string]any{"text": strings.ToUpper(text) + "!"}, nil
}

const greeting = `tqw: v1
name: greeting
steps:
  - id: loud
    action: shout
    with: {text: "hello ${ input.name }"}
  - id: done
    succeed: "${ output.text }"
`

// Example embeds tqw in a program: open an engine on a store, register an
// action, start the worker, run a workflow and read its result.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tqw-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "greeting.tqw.yaml")
	_ = os.WriteFile(path, []byte(greeting), 0o644)

	e, err := engine.Open(ctx, "file://"+filepath.Join(dir, "store"), engine.Options{
		Actions: []actions.Action{shout{}},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	w, err := e.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	o, err := e.Run(ctx, w, map[string]any{"name": "world"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(o.Status, string(o.Result))
	// Output: succeeded "HELLO WORLD!"
}

// ExampleActionDeclarations writes the declarations file that lets
// `tqw-dsl validate`, `lsp` and `schema` check workflows using the
// program's own actions.
func ExampleActionDeclarations() {
	f, err := engine.ActionDeclarations(shout{})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := f.Encode()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(b)) // write it as tqw-actions.json beside the workflows
	// Output:
	// {
	//   "tqw": "actions/v1",
	//   "actions": {
	//     "shout": {
	//       "with": {
	//         "type": "object",
	//         "properties": {
	//           "text": {
	//             "type": "string"
	//           }
	//         },
	//         "required": [
	//           "text"
	//         ],
	//         "additionalProperties": false
	//       }
	//     }
	//   }
	// }
}
