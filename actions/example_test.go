package actions_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/tqw-dsl/tqw/actions"
)

// upper is a custom action: `action: upper` with `with: {text: ...}`.
type upper struct{}

func (upper) Name() string { return "upper" }

func (upper) Execute(ctx context.Context, call *actions.Call) (any, error) {
	var args struct {
		Text string `arg:"text,required"`
	}
	if err := actions.DecodeArgs(call.Args, &args); err != nil {
		return nil, err
	}
	return map[string]any{"text": strings.ToUpper(args.Text)}, nil
}

func ExampleRegistry() {
	reg, err := actions.NewRegistry(upper{})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, ok := reg.Lookup("upper")
	if !ok {
		fmt.Println("not found")
		return
	}
	out, err := a.Execute(context.Background(), &actions.Call{
		RunID: "run-1", StepID: "shout", Attempt: 1,
		Args: map[string]any{"text": "hello"},
	})
	fmt.Println(out, err)

	_, err = a.Execute(context.Background(), &actions.Call{Args: map[string]any{"txt": "hello"}})
	fmt.Println(err)

	fmt.Println(reg.Register(upper{}))
	// Output:
	// map[text:HELLO] <nil>
	// validation: argument "txt": unknown argument; known arguments: text
	// register action "upper": action already registered; pick another name
}
