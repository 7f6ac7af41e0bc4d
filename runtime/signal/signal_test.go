package signal_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/signal"
)

// TestCheckKey: the keys workflows use pass; empty, oversized, non-UTF-8
// keys, control characters and dot segments are refused with
// ErrInvalidKey and a reason.
func TestCheckKey(t *testing.T) {
	for _, key := range []string{"approve:01J9", "a/b/c", "v1..2", "...", "a.b/.c", "é✓", strings.Repeat("k", signal.MaxKeyLen)} {
		if err := signal.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
	for key, why := range map[string]string{
		"":                                      "empty",
		strings.Repeat("k", signal.MaxKeyLen+1): "the limit",
		"a\x00b":                                "control character U+0000",
		"a\nb":                                  "control character U+000A",
		"a\x7fb":                                "control character U+007F",
		"a\u0085b":                              "control character U+0085",
		"\xffa":                                 "UTF-8",
		"..":                                    `(".."); keys are not paths`,
		"a/../b":                                `(".."); keys are not paths`,
		"a/..":                                  `(".."); keys are not paths`,
		"./a":                                   `("."); keys are not paths`,
		"a//b":                                  `(""); keys are not paths`,
		"/a":                                    `(""); keys are not paths`,
		"a/":                                    `(""); keys are not paths`,
	} {
		err := signal.CheckKey(key)
		if !errors.Is(err, signal.ErrInvalidKey) || !strings.Contains(err.Error(), why) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey saying %q", key, err, why)
		}
	}
}
