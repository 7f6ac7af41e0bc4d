package dsl

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// CallCycles returns an error diagnostic (CodeRecursiveCall) at each call
// step of w, parsed from the file path, whose call tree comes back to a
// file already on its way (a file calling itself, directly or through
// others), with the cycle's path: run refuses such a tree, since it pins
// the whole call tree at submit. The files the calls name are read
// relative to their caller; one that cannot be read or parsed ends its
// branch (run reports it). Cost: each file of the tree is read once.
func CallCycles(path string, w *Workflow) Diagnostics {
	if w == nil {
		return nil
	}
	root, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	c := &callWalk{parsed: map[string]*Workflow{root: w}}
	var out Diagnostics
	for _, s := range w.Steps {
		if s.Call == nil {
			continue
		}
		cycle := c.walk(resolveCall(root, s.Call.Workflow), []string{root})
		if cycle == nil {
			continue
		}
		names := make([]string, len(cycle))
		for i, p := range cycle {
			names[i] = displayPath(filepath.Dir(root), p)
		}
		out = append(out, Diagnostic{File: path, Line: s.Pos.Line, Col: s.Pos.Col, EndLine: s.Pos.Line, EndCol: s.Pos.Col,
			Severity: SeverityError, Code: CodeRecursiveCall,
			Message: fmt.Sprintf("step %q starts a recursive call tree: %s", s.ID, strings.Join(names, " → ")),
			Hint:    "run pins the whole call tree at submit, so calls cannot recurse; loop with next or switch instead"})
	}
	return out
}

type callWalk struct {
	parsed map[string]*Workflow // nil value: unreadable or invalid
	done   map[string]bool      // files whose whole tree has no cycle
}

// walk returns the files from the stack's first to the one that repeats,
// or nil when file's tree has no cycle.
func (c *callWalk) walk(file string, stack []string) []string {
	if i := slices.Index(stack, file); i >= 0 {
		return append(slices.Clone(stack[i:]), file)
	}
	if c.done[file] {
		return nil
	}
	w, seen := c.parsed[file]
	if !seen {
		w, _, _ = Load(file)
		c.parsed[file] = w
	}
	if w != nil {
		for _, s := range w.Steps {
			if s.Call == nil {
				continue
			}
			if cycle := c.walk(resolveCall(file, s.Call.Workflow), append(stack, file)); cycle != nil {
				return cycle
			}
		}
	}
	if c.done == nil {
		c.done = map[string]bool{}
	}
	c.done[file] = true
	return nil
}

// resolveCall is the file a call step of caller names: relative to the
// caller's folder, as the interpreter resolves it.
func resolveCall(caller, target string) string {
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(caller), target)
	}
	return filepath.Clean(target)
}

// displayPath shows p relative to dir when it is below it.
func displayPath(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}
