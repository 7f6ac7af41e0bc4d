package dsl

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// CallCycles returns an error diagnostic (CodeRecursiveCall) at each call
// step of w, parsed from the file path with opts, whose call tree comes
// back to a file already on its way (a file calling itself, directly or
// through others), with the cycle's path: run refuses such a tree, since
// it pins the whole call tree at submit. Files are compared as run
// compares them, by identity (os.SameFile), so another name of a file or
// a symlink does not hide a cycle. The files the calls name are read
// relative to their caller, with opts (an embedder's declared actions
// among them); one that cannot be read or parsed ends its branch (run
// reports it). Cost: each file of the tree is read once.
func CallCycles(path string, w *Workflow, opts Options) Diagnostics {
	if w == nil {
		return nil
	}
	root, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	info, err := os.Stat(root)
	if err != nil {
		return nil
	}
	c := &callWalk{opts: opts, files: map[string]*callFile{root: {w: w, info: info}}}
	var out Diagnostics
	for _, s := range w.all {
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
	opts  Options
	files map[string]*callFile // by cleaned path
}

// callFile is one file of the tree: its identity and its workflow (nil:
// unreadable or invalid); done once its whole tree has no cycle.
type callFile struct {
	info os.FileInfo
	w    *Workflow
	done bool
}

// file reads path once.
func (c *callWalk) file(path string) *callFile {
	if f, ok := c.files[path]; ok {
		return f
	}
	f := &callFile{}
	if info, err := os.Stat(path); err == nil {
		f.info = info
		f.w, _, _ = LoadWith(path, c.opts)
	}
	c.files[path] = f
	return f
}

// walk returns the files from the stack's first to the one that repeats
// (by identity), or nil when file's tree has no cycle.
func (c *callWalk) walk(file string, stack []string) []string {
	f := c.file(file)
	if f.info == nil {
		return nil // unreadable: run reports it
	}
	for i, on := range stack {
		if g := c.files[on]; g != nil && g.info != nil && os.SameFile(g.info, f.info) {
			return append(slices.Clone(stack[i:]), file)
		}
	}
	if f.done || f.w == nil {
		return nil
	}
	for _, s := range f.w.all {
		if s.Call == nil {
			continue
		}
		if cycle := c.walk(resolveCall(file, s.Call.Workflow), append(stack, file)); cycle != nil {
			return cycle
		}
	}
	f.done = true
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
