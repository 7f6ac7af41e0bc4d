package dsl

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBoundsMatchTheDocs checks that docs/DSL.md states the loader's
// bounds as DefaultLimits has them, and that the alias-bound error names
// the same bound.
func TestBoundsMatchTheDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/DSL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	number := func(pattern string) int {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(doc)
		if m == nil {
			t.Fatalf("docs/DSL.md does not state a bound matching %s", pattern)
		}
		n, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		pattern string
		want    int
	}{
		{`files above ([\d,]+) MiB \(` + "`file.too-large`", DefaultLimits.MaxFileBytes >> 20},
		{`aliases expanding to more than ([\d,]+) values \(` + "`yaml.alias-bound`", DefaultLimits.MaxAliasNodes},
		{`nesting deeper than ([\d,]+) \(` + "`yaml.too-deep`", DefaultLimits.MaxDepth},
		{`more than ([\d,]+) steps \(` + "`workflow.too-many-steps`", DefaultLimits.MaxSteps},
	} {
		if got := number(c.pattern); got != c.want {
			t.Errorf("docs/DSL.md states %d for %s; the loader's bound is %d", got, c.pattern, c.want)
		}
	}

	// A document whose aliases expand past the bound: the error states the
	// bound itself, not what was left of it.
	var sb strings.Builder
	sb.WriteString("tqw: v1\nname: t\nvars:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 7; i++ {
		sb.WriteString("  l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("*l" + strconv.Itoa(i-1))
		}
		sb.WriteString("]\n")
	}
	sb.WriteString("steps: [{id: a, succeed: 1}]\n")
	_, diags, err := Parse("laughs.yaml", []byte(sb.String()))
	if err == nil || len(diags) == 0 || diags[0].Code != CodeAliasBound {
		t.Fatalf("%v %s", err, diags)
	}
	want := "more than " + strconv.Itoa(DefaultLimits.MaxAliasNodes) + " values"
	if !strings.Contains(diags[0].Message, want) {
		t.Fatalf("alias-bound message %q does not state the bound (%q)", diags[0].Message, want)
	}
}

// TestEveryCodeIsListedInTheDocs checks that docs/DSL.md's list of
// diagnostic codes names every Code constant the package declares.
func TestEveryCodeIsListedInTheDocs(t *testing.T) {
	b, err := os.ReadFile("../docs/DSL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	start := strings.Index(doc, "Diagnostic codes: ")
	if start < 0 {
		t.Fatal(`docs/DSL.md has no "Diagnostic codes: " list`)
	}
	list := doc[start:]
	if end := strings.Index(list, "). "); end >= 0 {
		list = list[:end]
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					code, _ := strconv.Unquote(lit.Value)
					n++
					if !strings.Contains(list, "`"+code+"`") {
						t.Errorf("docs/DSL.md's list of diagnostic codes lacks %s (%s)", code, name.Name)
					}
				}
			}
		}
	}
	if n < 40 {
		t.Fatalf("found %d Code constants; want the package's whole list", n)
	}
}
