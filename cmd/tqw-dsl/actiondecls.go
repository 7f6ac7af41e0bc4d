package main

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/actiondecl"
)

// declLookup finds the action declarations a workflow is checked with:
// the --actions file when given, else the tqw-actions.json nearest the
// workflow's folder (read once per folder).
type declLookup struct {
	flag  string
	byDir map[string]*actiondecl.File
}

func addActionsFlag(cmd *cobra.Command, l *declLookup) {
	cmd.Flags().StringVar(&l.flag, "actions", "", "declarations of a program's own actions ("+actiondecl.FileName+
		", written by engine.ActionDeclarations); default: the nearest "+actiondecl.FileName+" in the workflow's folder or a parent")
}

// options returns the loader options for a workflow at path ("" or "-":
// the current folder); a declarations file that cannot be read or parsed
// is a usage error naming it.
func (l *declLookup) options(path string) (dsl.Options, error) {
	f, err := l.file(path)
	if err != nil {
		return dsl.Options{}, err
	}
	return f.LoadOptions(dsl.Options{}), nil
}

func (l *declLookup) file(path string) (*actiondecl.File, error) {
	if l.flag != "" {
		return l.read(l.flag, "--actions ")
	}
	dir := "."
	if path != "" && path != "-" {
		dir = filepath.Dir(path)
	}
	if f, ok := l.byDir[dir]; ok {
		return f, nil
	}
	found, err := actiondecl.Find(dir)
	if err != nil {
		return nil, failf(exitUsage, "%v", err)
	}
	var f *actiondecl.File
	if found != "" {
		if f, err = l.read(found, ""); err != nil {
			return nil, err
		}
	}
	if l.byDir == nil {
		l.byDir = map[string]*actiondecl.File{}
	}
	l.byDir[dir] = f
	return f, nil
}

func (l *declLookup) read(path, what string) (*actiondecl.File, error) {
	if f, ok := l.byDir["file:"+path]; ok {
		return f, nil
	}
	f, err := actiondecl.Read(path)
	if err != nil {
		return nil, failf(exitUsage, "%s%v", what, err)
	}
	if l.byDir == nil {
		l.byDir = map[string]*actiondecl.File{}
	}
	l.byDir["file:"+path] = f
	return f, nil
}

// freshDecls re-reads the declarations for path each time (the language
// server: the file may change while the editor runs); problems go to
// warn and the workflow is checked with the built-in actions only.
func freshDecls(flag string, warn func(msg string, args ...any)) func(path string) dsl.Options {
	return func(path string) dsl.Options {
		l := &declLookup{flag: flag}
		opts, err := l.options(path)
		if err != nil {
			warn("reading action declarations", "workflow", path, "err", err)
			return dsl.Options{}
		}
		return opts
	}
}
