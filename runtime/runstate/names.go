package runstate

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/internal/runlabel"
)

// Sentinel errors of the names a run goes by; match them with errors.Is.
var (
	// ErrInvalidRunID reports a run id the runtime cannot use in keys: see
	// ValidateRunID.
	ErrInvalidRunID = errors.New("runtime: invalid run id")
	// ErrInvalidLabel reports a run label the runtime could not index: see
	// ValidateLabels.
	ErrInvalidLabel = errors.New("runtime: invalid label")
)

// maxRunIDLen bounds a run id, which appears in KV keys, dedup keys and
// object keys.
const maxRunIDLen = 128

// ValidateRunID reports whether id can name a run: 1 to 128 bytes of ASCII
// letters, digits and "-_.:@=+", not starting with '.'.
func ValidateRunID(id string) error {
	if id == "" || len(id) > maxRunIDLen {
		return fmt.Errorf("%w %q: want 1 to %d characters", ErrInvalidRunID, id, maxRunIDLen)
	}
	if id[0] == '.' {
		return fmt.Errorf("%w %q: may not start with '.'", ErrInvalidRunID, id)
	}
	for i, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:@=+", r)
		if ok {
			continue
		}
		// Name the offending character as it is: a rune, quoted and
		// escaped when it does not print, or a byte that is not UTF-8
		// (never a byte shown as the Latin-1 character of its value).
		what := fmt.Sprintf("character %q", r)
		if _, size := utf8.DecodeRuneInString(id[i:]); r == utf8.RuneError && size == 1 {
			what = fmt.Sprintf("byte %#02x (not UTF-8)", id[i])
		}
		return fmt.Errorf("%w %q: %s not allowed; use letters, digits and -_.:@=+", ErrInvalidRunID, id, what)
	}
	return nil
}

// ValidateLabels reports whether labels can tag a run: at most 16,
// each key 1 to 63 bytes of ASCII letters, digits and "._-" (not starting
// with '.'), each value at most 256 bytes of UTF-8 without control
// characters.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > runlabel.Max {
		return fmt.Errorf("%w: %d labels; at most %d", ErrInvalidLabel, len(labels), runlabel.Max)
	}
	for k, v := range labels {
		if err := validateLabel(k, v); err != nil {
			return err
		}
	}
	return nil
}

func validateLabel(k, v string) error {
	if err := runlabel.CheckKey(k); err != nil {
		return fmt.Errorf("%w: key %q: %v", ErrInvalidLabel, k, err)
	}
	if err := runlabel.CheckValue(v); err != nil {
		return fmt.Errorf("%w: value of %q: %v", ErrInvalidLabel, k, err)
	}
	return nil
}
