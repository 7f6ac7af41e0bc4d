package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
)

// SecretPolicy is the set of secrets the runs of a serve may read: the
// names its operator allows (serve --secret NAME) and the secrets the
// workflow files of its workflows folder declare. Every other variable
// of the process's environment reads as unset, its own credentials
// (TQW_API_TOKEN, AWS_SECRET_ACCESS_KEY, ...) included unless named.
//
// The folder is scanned when the policy is made and again, for files
// that are new or whose size or modification time changed, whenever a
// name is asked for that no scan has seen (a file added while serve runs
// is found the first time a run needs its secret). The set only grows:
// a secret stays readable until restart after the file declaring it is
// removed, as runs pinned to that file may still need it. Safe for
// concurrent use.
type SecretPolicy struct {
	dir    string
	opts   dsl.Options
	getenv func(string) string
	named  map[string]bool

	mu       sync.Mutex
	declared map[string]bool
	scanned  map[string]fileStamp // by path under dir
}

type fileStamp struct {
	size int64
	mod  int64 // UnixNano
}

// ErrSecretNotAllowed is matched by SecretPolicy.Check's error.
var ErrSecretNotAllowed = errors.New("secret not allowed by this server")

// NewSecretPolicy returns the policy of the workflows folder dir ("" for
// none) and the names the operator allows, reading values with getenv
// (nil: os.Getenv) and parsing the folder's files with opts. Cost: one
// scan of dir (a directory read per folder, a stat and a parse per
// *.yaml or *.yml file).
func NewSecretPolicy(dir string, names []string, opts dsl.Options, getenv func(string) string) (*SecretPolicy, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	p := &SecretPolicy{dir: dir, opts: opts, getenv: getenv, named: map[string]bool{}, declared: map[string]bool{}, scanned: map[string]fileStamp{}}
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, "=\x00") {
			return nil, fmt.Errorf("%w: %q is not an environment variable name", ErrConfig, n)
		}
		p.named[n] = true
	}
	if dir != "" {
		if err := p.scan(); err != nil {
			return nil, fmt.Errorf("%w: scanning the workflows folder %s: %w", ErrConfig, dir, err)
		}
	}
	return p, nil
}

// Allowed reports whether runs may read the secret name.
func (p *SecretPolicy) Allowed(name string) bool {
	if p.named[name] {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.declared[name] {
		return true
	}
	if p.dir == "" || p.scan() != nil {
		return false
	}
	return p.declared[name]
}

// Getenv reads the secret name with the policy's getenv when it is
// allowed, else returns "" (as for an unset variable, so a step that
// reads it fails with "secret NAME is not set", never telling whether
// the process has it). Pass it as interpreter.Options.Getenv.
func (p *SecretPolicy) Getenv(name string) string {
	if !p.Allowed(name) {
		return ""
	}
	return p.getenv(name)
}

// Check refuses (ErrSecretNotAllowed) a workflow that declares, itself or
// in a workflow it calls, a secret the policy does not allow, naming
// each such secret; it does not read any value.
func (p *SecretPolicy) Check(w *interpreter.Workflow) error {
	var refused []string
	for _, name := range w.Secrets() {
		if !p.Allowed(name) {
			refused = append(refused, name)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s declares secret %s, which this server does not let runs read: start serve with --secret NAME for each, or declare it in a workflow file of its workflows folder",
		ErrSecretNotAllowed, w.Main.File, strings.Join(refused, ", "))
}

// scan adds the secrets of the folder's workflow files that are new or
// changed since the last scan; p.mu is held (or p not yet shared). It
// does not follow symlinks to folders, skips dot files and folders, and
// reads files as the loader does (dsl.ReadFile: regular files only).
func (p *SecretPolicy) scan() error {
	root, err := os.OpenRoot(p.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == "." {
				return err
			}
			return nil // an unreadable subfolder declares nothing
		}
		if path != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isWorkflowFile(d.Name()) {
			return nil
		}
		info, err := root.Stat(path)
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		stamp := fileStamp{size: info.Size(), mod: info.ModTime().UnixNano()}
		if old, ok := p.scanned[path]; ok && old == stamp {
			return nil
		}
		p.scanned[path] = stamp
		src, _, err := dsl.ReadFile(root, filepath.FromSlash(path), p.opts.Limits)
		if err != nil {
			return nil
		}
		wf, _, err := dsl.ParseWith(path, src, p.opts)
		if err != nil {
			return nil // a file that does not load runs nothing
		}
		for _, name := range wf.Secrets {
			p.declared[name] = true
		}
		return nil
	})
}
