package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// module is the import path of the module whose packages the tests
// below check.
const module = "github.com/tqw-dsl/tqw"

// layer is one row of README's Layers table.
type layer struct {
	name string
	// packages are module-relative paths; "x/..." is x and every
	// package under it.
	packages []string
	// imports are the layers below it whose packages it may import.
	imports []string
}

// layersHeader is the header row of README's Layers table.
var layersHeader = []string{"layer", "packages", "may import", "why"}

// readmeLayers parses README's Layers table.
func readmeLayers(t *testing.T) []layer {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := readmeCells(t, string(b), "### Layers")
	if !slices.Equal(rows[0], layersHeader) {
		t.Fatalf("README.md Layers table has the columns %q, want %q", rows[0], layersHeader)
	}
	layers, bad := parseLayers(rows[1:])
	for _, b := range bad {
		t.Error("README.md Layers table: " + b)
	}
	if t.Failed() {
		t.FailNow()
	}
	return layers
}

// parseLayers reads the rows of the Layers table (its cells, header
// left out) into layers, top first, and returns what breaks the table's
// form: a packages cell that is not a list of code spans, a may import
// cell naming anything but a layer further down ("—" names none).
func parseLayers(rows [][]string) ([]layer, []string) {
	var layers []layer
	var bad []string
	for _, cells := range rows {
		if len(cells) != len(layersHeader) {
			bad = append(bad, fmt.Sprintf("row %q has %d cells, want %d", cells, len(cells), len(layersHeader)))
			continue
		}
		l := layer{name: cells[0]}
		for _, p := range strings.Split(cells[1], ",") {
			p = strings.TrimSpace(p)
			inner := strings.TrimSuffix(strings.TrimPrefix(p, "`"), "`")
			if len(inner) != len(p)-2 || inner == "" || strings.Contains(inner, "`") {
				bad = append(bad, fmt.Sprintf("layer %s: packages entry %q is not one package in backquotes", l.name, p))
				continue
			}
			l.packages = append(l.packages, inner)
		}
		if cells[2] != "—" {
			for _, name := range strings.Split(cells[2], ",") {
				l.imports = append(l.imports, strings.TrimSpace(name))
			}
		}
		layers = append(layers, l)
	}
	for i, l := range layers {
		if l.name == "" || slices.IndexFunc(layers[:i], func(o layer) bool { return o.name == l.name }) >= 0 {
			bad = append(bad, fmt.Sprintf("row %d: layer name %q is empty or taken", i+1, l.name))
		}
		for _, name := range l.imports {
			if slices.IndexFunc(layers[i+1:], func(o layer) bool { return o.name == name }) < 0 {
				bad = append(bad, fmt.Sprintf("layer %s may import %q, which is no layer below it", l.name, name))
			}
		}
	}
	return layers, bad
}

// layerOf returns the index of pkg's layer: the row with its most
// specific entry (pkg itself before a "x/...", a longer "x/..." before
// a shorter), or -1.
func layerOf(layers []layer, pkg string) int {
	best, at := -1, -1
	for i, l := range layers {
		for _, p := range l.packages {
			score := -1
			if base, ok := strings.CutSuffix(p, "/..."); ok {
				if pkg == base || strings.HasPrefix(pkg, base+"/") {
					score = 2 * len(base)
				}
			} else if pkg == p {
				score = 2*len(p) + 1
			}
			if score > best {
				best, at = score, i
			}
		}
	}
	return at
}

// importViolations returns every import of imports (package → the module
// packages its non-test files import, paths relative to the module) that
// the layers do not allow: a package may import its own layer's packages
// and those of the layers its row names.
func importViolations(layers []layer, imports map[string][]string) []string {
	var bad []string
	for pkg, deps := range imports {
		from := layerOf(layers, pkg)
		if from < 0 {
			bad = append(bad, fmt.Sprintf("%s is in no layer: add it to README's Layers table", pkg))
			continue
		}
		for _, dep := range deps {
			switch to := layerOf(layers, dep); {
			case to < 0:
				bad = append(bad, fmt.Sprintf("%s imports %s, which is in no layer: add it to README's Layers table", pkg, dep))
			case to != from && !slices.Contains(layers[from].imports, layers[to].name):
				bad = append(bad, fmt.Sprintf("%s (layer %s) imports %s (layer %s), which README's Layers table does not let it", pkg, layers[from].name, dep, layers[to].name))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// moduleImports is the module's packages, each with the module packages
// its non-test files import, paths relative to the module, as go list
// reports them.
var moduleImports = sync.OnceValues(func() (map[string][]string, error) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		imports[pkg] = []string{}
		for _, dep := range f[1:] {
			if rel, ok := strings.CutPrefix(dep, module+"/"); ok {
				imports[pkg] = append(imports[pkg], rel)
			}
		}
	}
	if len(imports) < 40 || len(imports["interpreter"]) == 0 {
		return nil, fmt.Errorf("go list reported %d packages, interpreter importing %v: not the module", len(imports), imports["interpreter"])
	}
	return imports, nil
})

// oneDoor names the layers README says reach the storage stack through
// runtime/storage and runtime/repair only, and the layers their rows
// may not name.
var oneDoor = struct{ above, below []string }{
	above: []string{"examples", "cli", "server", "engine", "interpreter"},
	below: []string{"queue", "kv"},
}

// TestImportsPointDown checks every package's imports against README's
// Layers table, and that the table keeps the one door.
func TestImportsPointDown(t *testing.T) {
	t.Parallel()
	layers := readmeLayers(t)
	for _, name := range oneDoor.above {
		i := slices.IndexFunc(layers, func(l layer) bool { return l.name == name })
		if i < 0 {
			t.Errorf("README's Layers table has no layer %s", name)
			continue
		}
		for _, below := range oneDoor.below {
			if slices.Contains(layers[i].imports, below) {
				t.Errorf("README's Layers table: layer %s may import %s; above the runtime, use runtime/storage or runtime/repair", name, below)
			}
		}
	}
	imports, err := moduleImports()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range importViolations(layers, imports) {
		t.Error(v)
	}
}

// TestLayersTableMatchesGoList checks that every package of go list
// ./... is in a row of README's Layers table and that every entry of the
// table names a package, in one row only.
func TestLayersTableMatchesGoList(t *testing.T) {
	t.Parallel()
	layers := readmeLayers(t)
	imports, err := moduleImports()
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range imports {
		if layerOf(layers, pkg) < 0 {
			t.Errorf("%s is in no row of README's Layers table", pkg)
		}
	}
	seen := map[string]string{}
	for _, l := range layers {
		for _, p := range l.packages {
			if other, ok := seen[p]; ok {
				t.Errorf("%s is in the rows %s and %s of README's Layers table", p, other, l.name)
			}
			seen[p] = l.name
			base, tree := strings.CutSuffix(p, "/...")
			named := false
			for pkg := range imports {
				named = named || pkg == base || tree && strings.HasPrefix(pkg, base+"/")
			}
			if !named {
				t.Errorf("README's Layers table: layer %s lists %s, which go list does not report", l.name, p)
			}
		}
	}
}

// The checkers flag an import the table does not allow, a package in no
// layer, and a table whose rows point up or name no layer.
func TestLayersCheckersFire(t *testing.T) {
	layers, bad := parseLayers([][]string{
		{"top", "`interpreter`, `internal/queuetest`", "mid, low", ""},
		{"mid", "`runtime`", "low, top, nowhere", ""},
		{"low", "`runtime/store/...`, `internal/...`", "—", ""},
		{"low", "runtime/clock", "—", ""},
	})
	wantBad := []string{
		"layer low: packages entry \"runtime/clock\" is not one package in backquotes",
		"layer mid may import \"top\", which is no layer below it",
		"layer mid may import \"nowhere\", which is no layer below it",
		"row 4: layer name \"low\" is empty or taken",
	}
	if !slices.Equal(bad, wantBad) {
		t.Fatalf("table problems:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
	}
	if got := layerOf(layers, "internal/queuetest"); got != 0 {
		t.Errorf("internal/queuetest is in layer %d, want 0 (its own entry before internal/...)", got)
	}
	got := importViolations(layers[:3], map[string][]string{
		"interpreter":         {"runtime", "runtime/store/queue"},
		"runtime/store/queue": {"runtime", "internal/procid"},
		"runtime":             {"runtime/store/kv", "server"},
		"newthing":            nil,
	})
	want := []string{
		"newthing is in no layer: add it to README's Layers table",
		"runtime imports server, which is in no layer: add it to README's Layers table",
		"runtime/store/queue (layer low) imports runtime (layer mid), which README's Layers table does not let it",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// maxDocNames bounds the lines of go doc -short of a package outside
// cmd/ and examples/: the names its API shows at a glance. The language
// (dsl) and its interpreter gain a type or two per construct, hence 80.
const maxDocNames = 80

// TestPackageAPIsStaySmall checks go doc -short of every package
// outside cmd/ and examples/ against maxDocNames.
func TestPackageAPIsStaySmall(t *testing.T) {
	t.Parallel()
	imports, err := moduleImports()
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for pkg := range imports {
		if pkg != "" && !strings.HasPrefix(pkg, "cmd/") && !strings.HasPrefix(pkg, "examples/") {
			pkgs = append(pkgs, pkg)
		}
	}
	sort.Strings(pkgs)
	lines := make([]int, len(pkgs))
	errs := make([]error, len(pkgs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, pkg := range pkgs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := exec.Command("go", "doc", "-short", module+"/"+pkg).Output()
			if err != nil {
				errs[i] = fmt.Errorf("go doc -short %s: %w", pkg, err)
				return
			}
			lines[i] = strings.Count(string(out), "\n")
		})
	}
	wg.Wait()
	for i, pkg := range pkgs {
		switch {
		case errs[i] != nil:
			t.Error(errs[i])
		case lines[i] > maxDocNames:
			t.Errorf("go doc -short %s lists %d names, more than %d: unexport what only the package uses, merge what says the same", pkg, lines[i], maxDocNames)
		}
	}
}
