package dsl

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/dsl/dslgen"
)

// FuzzLoad feeds arbitrary bytes to the loader: it must never panic,
// must return either a workflow or an error diagnostic, and must finish
// in bounded time (aliases, depth and size are bounded).
func FuzzLoad(f *testing.F) {
	for _, pattern := range []string{"../workflows/*.yaml", "testdata/invalid/*.yaml", "testdata/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add(dslgen.Workflow(8))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("tqw: v1\nname: t\nsteps: [{id: a, next: \"${ }\"}]"))
	f.Fuzz(func(t *testing.T, src []byte) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				panic(fmt.Sprintf("Parse did not return within 20s on %q", src))
			}
		}()
		w, diags, err := Parse("fuzz.yaml", src)
		switch {
		case err != nil && w != nil:
			t.Fatal("both a workflow and an error")
		case err != nil && !diags.HasErrors():
			t.Fatalf("error %v without an error diagnostic", err)
		case err == nil && w == nil:
			t.Fatal("neither a workflow nor an error")
		}
		for _, d := range diags {
			if d.Code == CodeInternal {
				t.Fatalf("loader bug: %s", d)
			}
			if d.Line < 1 || d.Col < 1 || d.Code == "" || d.Message == "" {
				t.Fatalf("malformed diagnostic %+v", d)
			}
		}
		if w != nil {
			_ = w.Edges()
		}
	})
}
