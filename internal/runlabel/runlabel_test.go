package runlabel

import (
	"strings"
	"testing"
)

func TestKeysAndValues(t *testing.T) {
	for k, ok := range map[string]bool{"team": true, "a.b_c-9": true, "-x": true, "": false, ".hidden": false,
		"sp ace": false, "é": false, strings.Repeat("k", MaxKeyLen): true, strings.Repeat("k", MaxKeyLen+1): false} {
		if err := CheckKey(k); (err == nil) != ok {
			t.Errorf("CheckKey(%q) = %v; want ok=%v", k, err, ok)
		}
	}
	for v, ok := range map[string]bool{"": true, "any text, é": true, "a\tb": false, "a\x7fb": false, "\xff": false,
		strings.Repeat("v", MaxValueLen): true, strings.Repeat("v", MaxValueLen+1): false} {
		if err := CheckValue(v); (err == nil) != ok {
			t.Errorf("CheckValue(%q) = %v; want ok=%v", v, err, ok)
		}
	}
}
