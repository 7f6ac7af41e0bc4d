package file

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// FuzzKeyPath checks that every valid key maps 1:1 to a path strictly
// below the root that never looks like a temp or lock file.
func FuzzKeyPath(f *testing.F) {
	for _, k := range []string{"a", "a/b", "a-b", "a.b", "a0", "..a", "a/..b/.c", "é/ß", " x", "x "} {
		f.Add(k)
	}
	s := &Store{root: "/r/oot"}
	f.Fuzz(func(t *testing.T, key string) {
		if objstore.ValidateKey(key) != nil {
			return
		}
		p := s.path(key)
		rel, err := filepath.Rel(s.root, p)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("key %q maps to %q, outside the root", key, p)
		}
		if filepath.ToSlash(rel) != key {
			t.Fatalf("key %q maps to %q, which reads back as %q", key, p, filepath.ToSlash(rel))
		}
		if strings.Contains(rel, reserved) {
			t.Fatalf("key %q maps to a reserved name %q", key, rel)
		}
	})
}
