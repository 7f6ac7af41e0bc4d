package interpreter

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/tqw-dsl/tqw/dsl"
)

// MinSecretLength is the shortest secret value, in bytes, that a run
// accepts. Redaction replaces a secret wherever it occurs, and a short
// value occurs by chance in unrelated data (a secret "1" would turn
// "count=10" into "count=***0"), so tqw refuses short secrets instead
// of rewriting data that has nothing to do with them. Eight bytes is the
// bound GitLab applies to masked CI variables for the same reason; real
// credentials (API keys, tokens, passwords) are longer.
const MinSecretLength = 8

// ErrSecretTooShort is matched (errors.Is) by a *SecretTooShortError.
var ErrSecretTooShort = errors.New("secret shorter than the minimum length")

// SecretTooShortError is a declared secret whose value is set but shorter
// than MinSecretLength. It names the secret, never its value.
type SecretTooShortError struct {
	Workflow string // the name of the workflow that declares it
	Name     string
	Len      int // bytes
}

// Error says which secret is too short, the minimum, and what to do.
func (e *SecretTooShortError) Error() string {
	return fmt.Sprintf("secret %s (declared by workflow %s) is %d bytes long; a secret must be at least %d bytes, as a shorter value would be redacted out of unrelated data: set a longer value, or none",
		e.Name, e.Workflow, e.Len, MinSecretLength)
}

// Is makes errors.Is(err, ErrSecretTooShort) true.
func (e *SecretTooShortError) Is(target error) bool { return target == ErrSecretTooShort }

// shortSecrets returns an error for each secret wf declares whose value
// (read with getenv) is set but shorter than MinSecretLength. An empty
// value counts as unset: nothing is redacted for it, and a step that
// reads it fails as for a secret that is not set.
func shortSecrets(wf *dsl.Workflow, getenv func(string) string) []error {
	var errs []error
	for _, name := range wf.Secrets {
		if v := getenv(name); v != "" && len(v) < MinSecretLength {
			errs = append(errs, &SecretTooShortError{Workflow: wf.Name, Name: name, Len: len(v)})
		}
	}
	return errs
}

// CheckSecrets reads, with getenv, the secrets that w and every workflow it
// calls declare, and refuses (ErrSecretTooShort, naming each secret, never
// its value) any whose value is set but shorter than MinSecretLength.
// Unset secrets pass: the worker that runs the steps may have them. Call it
// before submitting; the interpreter also fails a run whose worker reads
// such a value, at the step it is at.
func (w *Workflow) CheckSecrets(getenv func(string) string) error {
	wfs := make([]*dsl.Workflow, 0, len(w.all))
	for _, wf := range w.all {
		wfs = append(wfs, wf)
	}
	slices.SortFunc(wfs, func(a, b *dsl.Workflow) int { return cmp.Compare(a.File, b.File) })
	var errs []error
	for _, wf := range wfs {
		errs = append(errs, shortSecrets(wf, getenv)...)
	}
	return errors.Join(errs...)
}

// Secrets returns the names of the secrets w and every workflow it calls
// declare, sorted, each once.
func (w *Workflow) Secrets() []string {
	var out []string
	for _, wf := range w.all {
		for _, name := range wf.Secrets {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}
