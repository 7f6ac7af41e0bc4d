package runlabel

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits of a run's labels.
const (
	// Max bounds the labels of one run, the workflow label among them.
	Max = 16
	// MaxKeyLen and MaxValueLen bound a label's key and value in bytes.
	MaxKeyLen   = 63
	MaxValueLen = 256
)

// Workflow is the label carrying the run's workflow name, which tqw sets
// itself (interpreter.LabelWorkflow).
const Workflow = "workflow"

// CheckKey says what is wrong with k as a label key: 1 to MaxKeyLen
// bytes of ASCII letters, digits and "._-", not starting with '.'.
func CheckKey(k string) error {
	if k == "" || len(k) > MaxKeyLen || k[0] == '.' {
		return fmt.Errorf("want 1 to %d characters, not starting with '.'", MaxKeyLen)
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("character %q not allowed; use letters, digits and ._-", r)
		}
	}
	return nil
}

// CheckValue says what is wrong with v as a label value: at most
// MaxValueLen bytes of UTF-8 without control characters.
func CheckValue(v string) error {
	if len(v) > MaxValueLen || !utf8.ValidString(v) {
		return fmt.Errorf("want at most %d bytes of UTF-8", MaxValueLen)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return errors.New("holds a control character")
		}
	}
	return nil
}
