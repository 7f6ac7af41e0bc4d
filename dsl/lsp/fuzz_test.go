package lsp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tqw-dsl/tqw/dsl"
)

// FuzzFeatures runs every position-based feature at a fuzzed position of
// a fuzzed text: none may panic, whatever the text (a half-typed file is
// the common case) and wherever the cursor.
func FuzzFeatures(f *testing.F) {
	for _, pattern := range []string{"../../workflows/*.yaml", "../testdata/invalid/*.yaml", "../testdata/graph/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			src, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(string(src), 8, 10, uint8(0))
		}
	}
	f.Add("steps:\n  - id: a\n    with: {x: ${ steps.", 2, 30, uint8(1))
	f.Add("é\t𝄞: [\"${\n", 0, 3, uint8(2))
	f.Fuzz(func(t *testing.T, text string, line, char int, enc uint8) {
		if len(text) > 1<<16 {
			return
		}
		d := &document{uri: "file:///f.tqw.yaml", path: "/f.tqw.yaml", text: text, lines: splitLines(text)}
		if d.outline = dsl.ParseOutline([]byte(text)); d.outline == nil {
			d.outline = &dsl.Outline{}
		}
		_, d.diags, _ = dsl.Parse(d.path, []byte(text))
		v := view{d: d, enc: encoding(enc % 3)}
		p := v.fromLSP(Position{Line: line % (len(d.lines) + 2), Character: char})
		v.definition(p)
		v.references(p, true)
		v.prepareRename(p)
		_, _ = v.rename(p, "renamed")
		v.symbols()
		v.complete(p)
		v.hover(p)
		v.codeActions(dsl.Pos{Line: 1, Col: 1}, dsl.Pos{Line: len(d.lines) + 1, Col: 1})
		for _, dg := range d.diags {
			v.diagnostic(dg)
		}
	})
}
