package dsl

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// TestGraphGolden pins what `tqw-dsl graph` draws, in both formats: the
// workflows written before nested blocks draw exactly as they did, and
// blocks.yaml draws every kind of block.
func TestGraphGolden(t *testing.T) {
	for _, c := range []struct{ name, file string }{
		{"refund", "../workflows/refund.tqw.yaml"},
		{"retry", "../workflows/retry.tqw.yaml"},
		{"approval", "../workflows/approval.tqw.yaml"},
		{"blocks", "testdata/graph/blocks.tqw.yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, diags, err := Load(c.file)
			if err != nil {
				t.Fatalf("%v\n%s", err, diags)
			}
			var m, d bytes.Buffer
			if err := w.WriteMermaid(&m); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteDOT(&d); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", "golden", "graph-"+c.name+".v1.mmd"), m.Bytes())
			golden.Check(t, filepath.Join("testdata", "golden", "graph-"+c.name+".v1.dot"), d.Bytes())
		})
	}
}
