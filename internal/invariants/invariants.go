package invariants

import "fmt"

// Violation is the panic value of a failed check.
type Violation struct{ Msg string }

func (v Violation) Error() string { return "tqw invariant violated: " + v.Msg }

// Check panics with a Violation when checks are enabled and cond is false.
// Callers guard costly conditions with `if invariants.Enabled`.
func Check(cond bool, format string, args ...any) {
	if Enabled && !cond {
		panic(Violation{Msg: fmt.Sprintf(format, args...)})
	}
}
