package dsl

import (
	"fmt"
	"strings"

	"github.com/tqw-dsl/tqw/internal/runlabel"
)

// Label is one run label a workflow file declares under labels:.
type Label struct {
	Key string
	// Value is a string or a template reading input and run; it must
	// evaluate to a string (EvalLabels).
	Value *Template
}

// labels builds the labels: map: keys and literal values by the run
// label rules (one of the labels a run carries is its workflow's name,
// so a file declares at most runlabel.Max-1), templates reading only
// input and run, which is all a run has when it is submitted.
func (b *builder) labels(n *node) {
	if n == nil || n.kind != kMap {
		return
	}
	if len(n.keys) > runlabel.Max-1 {
		b.sink.errorf(n.pos, CodeLabelInvalid, "keep the labels you list runs by; put the rest in the input",
			"labels declares %d labels; a run carries at most %d, one of them the workflow's name", len(n.keys), runlabel.Max-1)
	}
	b.labelScope = true
	defer func() { b.labelScope = false }()
	for i, key := range n.keys {
		k, v := key.scalar.(string), n.vals[i]
		if k == runlabel.Workflow {
			b.sink.errorf(key.pos, CodeLabelInvalid, "pick another key", "label %q is the workflow's name, which tqw sets on every run", k)
			continue
		}
		if err := runlabel.CheckKey(k); err != nil {
			b.sink.errorf(key.pos, CodeLabelInvalid, "", "label key %q: %v", k, err)
			continue
		}
		if v.kind != kString {
			b.sink.errorf(v.pos, CodeLabelInvalid, `quote it: labels are strings ("3", "true")`, "label %s: want a string, got %s %s", k, article(v.kind), v.kind)
			continue
		}
		if s := v.str(); !strings.Contains(s, "${") {
			if err := runlabel.CheckValue(s); err != nil {
				b.sink.errorf(v.pos, CodeLabelInvalid, "", "label %s: value %v", k, err)
				continue
			}
		}
		b.w.Labels = append(b.w.Labels, Label{Key: k, Value: b.template(v, scInput|scRun, -1)})
	}
}

// EvalLabels evaluates the workflow's labels against env (input and
// run) into their values. A value that is not a string, or that breaks
// the label rules, is an error naming the label.
func (w *Workflow) EvalLabels(env *Env) (map[string]string, error) {
	if len(w.Labels) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(w.Labels))
	for _, l := range w.Labels {
		v, err := l.Value.Eval(env)
		if err != nil {
			return nil, fmt.Errorf("label %s: %w", l.Key, err)
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("label %s at %s: the template evaluates to %s, not a string; labels are strings: write string(...) or put the value in a longer text", l.Key, l.Value.Pos, describeValue(v))
		}
		if err := runlabel.CheckValue(s); err != nil {
			return nil, fmt.Errorf("label %s at %s: the value %v", l.Key, l.Value.Pos, err)
		}
		out[l.Key] = s
	}
	return out, nil
}

// describeValue names a value's type and, for a scalar, shows it.
func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a map"
	case []any:
		return "a list"
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", x)
	}
	return fmt.Sprintf("a %T", v)
}

func article(k nodeKind) string {
	if k == kInt {
		return "an"
	}
	return "a"
}
