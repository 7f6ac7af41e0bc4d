package main

import (
	"errors"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestEveryPackageDocSaysWhatItIsFor checks every non-test package in the
// repository (the bench/dbos module included): it has a package comment,
// the comment's first sentence names the package and says what it is for
// in at least minSynopsisWords words, and the comment holds no dated or
// measured figure (measuredFigures); figures live in docs/BENCHMARKS.md
// with their command, date and machine.
func TestEveryPackageDocSaysWhatItIsFor(t *testing.T) {
	t.Parallel()
	docs, err := packageDocs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 40 || docs["runtime"] == "" {
		t.Fatalf("found %d packages, runtime's comment %q: not the repository", len(docs), docs["runtime"])
	}
	for dir, text := range docs {
		for _, problem := range docProblems(text) {
			t.Errorf("%s: %s", dir, problem)
		}
	}
}

// The checker flags a missing comment, a thin first sentence and each kind
// of measured figure, and lets the settings and bounds docs state pass.
func TestDocProblemsFire(t *testing.T) {
	good := "Package kv is an ordered, transactional key-value store.\n\n" +
		"A batch lingers up to Options.Linger (10 ms), at most 5 s, in one 4 MiB object;\n" +
		"the default TTL of 15 s costs 12 PUTs a minute.\n"
	if p := docProblems(good); len(p) != 0 {
		t.Errorf("mechanism text flagged: %v", p)
	}
	for _, bad := range []string{
		"",
		"Package kv stores.\n",
		"Stores keys and values for the runtime.\n",
		"Package kv is a store.\n\nMeasured on 2026-12-01 on 2 cores.\n",
		"Package kv is a store.\n\nIt commits 42,322 ops/s.\n",
		"Package kv is a store.\n\nIt is 6.53× DBOS.\n",
		"Package kv is a store.\n\nIt is 22x faster.\n",
		"Package kv is a store.\n\nA reopened writer holds 71 MB of heap.\n",
		"Package kv is a store.\n\nA PUT takes about 4 ms.\n",
		"Package kv is a store.\n\nAn fdatasync takes 150-300 µs.\n",
		"Package kv is a store.\n\nIt reopens in 0.4 s.\n",
	} {
		if len(docProblems(bad)) == 0 {
			t.Errorf("not flagged: %q", bad)
		}
	}
}

// TestBenchmarkLinksResolve checks that every link into docs/BENCHMARKS.md
// (from Go and Markdown files, its own "(#...)" links included) names one
// of its headings, so the pointers the package docs give stay true.
func TestBenchmarkLinksResolve(t *testing.T) {
	t.Parallel()
	bench, err := os.ReadFile("../../docs/BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := markdownAnchors(string(bench))
	if !anchors["summary"] || !anchors["history"] {
		t.Fatalf("docs/BENCHMARKS.md has no summary or history heading: %v", anchors)
	}
	linkInto := regexp.MustCompile(`BENCHMARKS\.md#([\w-]+)`)
	ownLink := regexp.MustCompile(`\]\(#([\w-]+)\)`)
	links := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || name == "testdata" || (strings.HasPrefix(name, ".") && path != "../..") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		matches := linkInto.FindAllStringSubmatch(string(text), -1)
		if filepath.Base(path) == "BENCHMARKS.md" {
			matches = append(matches, ownLink.FindAllStringSubmatch(string(text), -1)...)
		}
		for _, m := range matches {
			links++
			if !anchors[m[1]] {
				t.Errorf("%s links to docs/BENCHMARKS.md#%s, which no heading makes", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if links < 20 {
		t.Errorf("found %d links into docs/BENCHMARKS.md: not the repository", links)
	}
}

// markdownAnchors returns the anchors GitHub makes of a Markdown file's
// headings: lower case, spaces to hyphens, other punctuation dropped, a
// repeated anchor numbered -1, -2, ...; lines in code fences are no
// headings.
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		anchor := slug.String()
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor = anchor + "-" + strconv.Itoa(n)
		} else {
			seen[anchor] = 1
		}
		anchors[anchor] = true
	}
	return anchors
}

const minSynopsisWords = 4

// measuredFigures are the forms a benchmark's figure takes. The rule,
// kept simple on purpose: a doc may state the values it sets or bounds
// (an option's default, a limit, a size), exactly, and nothing it
// measured. So a date, a rate or a ratio is always a figure; memory in
// decimal units (KB, MB, GB) is a measurement, since sizes the code sets
// are written in binary units (KiB, MiB, GiB: "one 4 MiB object"); a
// duration is a setting when it is exact and round ("Options.Linger
// (10 ms)", "every 5 s") and a measurement when it is approximate
// ("about 4 ms"), a range ("150-300 µs") or has decimals ("0.4 s").
var measuredFigures = []struct {
	what string
	re   *regexp.Regexp
}{
	{"a date", regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b`)},
	{"a rate", regexp.MustCompile(`\d[\d.,]*\s?(ops|steps|runs|jobs|commits|items|events|submits)/s\b`)},
	{"a ratio", regexp.MustCompile(`\d[\d.,]*\s?×|\d[\d.,]*\s?x (faster|slower)`)},
	{"measured memory (settings use KiB, MiB, GiB)", regexp.MustCompile(`\d[\d.,]*\s?(KB|MB|GB)\b`)},
	{"an approximate duration", regexp.MustCompile(`(about|around|roughly|~|≈)\s?\d[\d.,]*\s?(ns|µs|us|ms|s)\b`)},
	{"a range of durations", regexp.MustCompile(`\d[\d.,]*\s?[-–]\s?\d[\d.,]*\s?(ns|µs|us|ms|s)\b`)},
	{"a duration with decimals", regexp.MustCompile(`\d+\.\d+\s?(ns|µs|us|ms|s)\b`)},
}

// docProblems says what is wrong with one package comment.
func docProblems(text string) []string {
	if strings.TrimSpace(text) == "" {
		return []string{"no package comment: its first sentence must say what the package is for"}
	}
	var problems []string
	synopsis := new(doc.Package).Synopsis(text)
	words := strings.Fields(synopsis)
	if len(words) < minSynopsisWords || (words[0] != "Package" && words[0] != "Command") {
		problems = append(problems, "the first sentence must be \"Package <name> ...\" (or \"Command <name> ...\") saying what it is for in at least 4 words, not "+
			`"`+synopsis+`"`)
	}
	for _, line := range strings.Split(text, "\n") {
		for _, f := range measuredFigures {
			if m := f.re.FindString(line); m != "" {
				problems = append(problems, "holds "+f.what+" ("+m+" in \""+strings.TrimSpace(line)+"\"): state the mechanism and point to docs/BENCHMARKS.md#<section>")
			}
		}
	}
	return problems
}

// packageDocs returns the package comment of every non-test package under
// root, by directory relative to root. Build constraints apply as in a
// build on this machine; testdata, vendor, node_modules and hidden folders
// are skipped, as go build skips them.
func packageDocs(root string) (map[string]string, error) {
	docs := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (name == "testdata" || name == "vendor" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		var comments []string
		fset := token.NewFileSet()
		for _, file := range pkg.GoFiles {
			src, err := os.ReadFile(filepath.Join(path, file))
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, file, src, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			if f.Doc != nil {
				comments = append(comments, f.Doc.Text())
			}
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		docs[filepath.ToSlash(rel)] = strings.Join(comments, "\n")
		return nil
	})
	return docs, err
}
