package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
)

func init() { commands = append(commands, newValidateCmd) }

// validateFormats are the output formats of validate, each written by
// the function of the same name in validate_report.go.
var validateFormats = []string{"text", "json", "github", "sarif", "rdjson"}

// checkedFile is one file validate loaded: its name as reported, its
// bytes (for column conversions) and what the loader said.
type checkedFile struct {
	name  string
	src   []byte
	w     *dsl.Workflow
	diags dsl.Diagnostics
	// cases is set for a valid test file (NAME.test.yaml): its cases.
	cases *int
}

// valid reports whether the file has no error diagnostic.
func (f checkedFile) valid() bool { return f.w != nil || f.cases != nil }

func newValidateCmd() *cobra.Command {
	var format, stdinName string
	var asJSON bool
	var decls declLookup
	cmd := &cobra.Command{
		Use:   "validate FILE|DIR|-...",
		Short: "Check workflow files and print every diagnostic",
		Long: `validate loads each file, checks it against the schema and the language's
rules, and prints every problem as file:line:col: error|warning: message [code],
with a hint line where one helps. A directory stands for every *.yaml and
*.yml file under it (hidden directories and node_modules skipped); - reads
one workflow from standard input, named --stdin-filename in diagnostics.

--format json prints a report shaped as schemas/validate-report.schema.json
(--json is the same); github prints GitHub Actions workflow commands
(annotations); sarif prints SARIF 2.1.0; rdjson prints reviewdog's
Diagnostic Format. Columns count Unicode code points from 1, except in
rdjson, whose columns count UTF-8 bytes as its format requires.

Exit code 0 means every file is valid (warnings allowed), 1 that one is not,
2 a usage error.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				if cmd.Flags().Changed("format") && format != "json" {
					return failf(exitUsage, "--json and --format %s: choose one", format)
				}
				format = "json"
			}
			if !slices.Contains(validateFormats, format) {
				return failf(exitUsage, "--format %q: want one of %s", format, strings.Join(validateFormats, ", "))
			}
			paths, err := expandValidateArgs(args)
			if err != nil {
				return err
			}
			var files []checkedFile
			invalid := 0
			for _, p := range paths {
				opts, err := decls.options(p)
				if err != nil {
					return err
				}
				f := checkFile(p, cmd.InOrStdin(), stdinName, opts)
				if !f.valid() {
					invalid++
				}
				files = append(files, f)
			}
			out := cmd.OutOrStdout()
			switch format {
			case "text":
				err = writeText(out, files)
			case "json":
				err = writeJSON(out, files)
			case "github":
				err = writeGitHub(out, files)
			case "sarif":
				err = writeSARIF(out, files)
			case "rdjson":
				err = writeRDJSON(out, files)
			}
			if err != nil {
				return err
			}
			if invalid > 0 {
				return failf(exitInvalid, "%d of %d files invalid", invalid, len(files))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: "+strings.Join(validateFormats, ", "))
	cmd.Flags().BoolVar(&asJSON, "json", false, "the same as --format json")
	addActionsFlag(cmd, &decls)
	cmd.Flags().StringVar(&stdinName, "stdin-filename", "<stdin>", "the file name diagnostics give a workflow read from - (standard input)")
	return cmd
}

// expandValidateArgs turns the arguments into the list of files to check:
// files and - as given, directories as the workflow files under them.
func expandValidateArgs(args []string) ([]string, error) {
	var out []string
	stdin := false
	for _, a := range args {
		if a == "-" {
			if stdin {
				return nil, failf(exitUsage, "- (standard input) given twice")
			}
			stdin = true
			out = append(out, a)
			continue
		}
		st, err := os.Stat(a)
		if err != nil || !st.IsDir() {
			out = append(out, a) // a missing file is reported as file.read
			continue
		}
		// Test files are checked by tqw-dsl test (or named one by one).
		found, err := filesUnder(a, func(p string) bool {
			ext := filepath.Ext(p)
			return (ext == ".yaml" || ext == ".yml") && !testfile.Is(p)
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, failf(exitUsage, "directory %s holds no *.yaml or *.yml file", a)
		}
		out = append(out, found...)
	}
	return out, nil
}

// filesUnder lists the files under dir that keep takes, in lexical
// order, skipping hidden folders and node_modules.
func filesUnder(dir string, keep func(path string) bool) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if keep(p) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, failf(exitUsage, "reading directory %s: %v", dir, err)
	}
	return out, nil
}

// checkFile loads one workflow: path "-" reads stdin and names the
// result stdinName. A file that cannot be read gets a file.read diagnostic.
func checkFile(path string, stdin io.Reader, stdinName string, opts dsl.Options) checkedFile {
	name := path
	var (
		src []byte
		err error
	)
	if path == "-" {
		name = stdinName
		// One byte past the bound, so the loader reports file.too-large.
		src, err = io.ReadAll(io.LimitReader(stdin, int64(dsl.DefaultLimits.MaxFileBytes)+1))
	} else {
		// A regular file only: a FIFO named *.yaml does not hang validate.
		src, _, err = dsl.ReadFile(nil, path, dsl.Limits{})
	}
	if err != nil {
		return readFailure(name, err)
	}
	if path != "-" && testfile.Is(path) {
		return checkTestFile(name, src, opts)
	}
	w, diags, err := dsl.ParseWith(name, src, opts)
	if err != nil && !errors.Is(err, dsl.ErrInvalid) {
		return readFailure(name, err)
	}
	if path != "-" {
		if cycles := dsl.CallCycles(name, w, opts); len(cycles) > 0 {
			// run refuses a recursive call tree: the file is not valid.
			diags, w = append(diags, cycles...), nil
		}
	}
	if diags == nil {
		diags = dsl.Diagnostics{}
	}
	return checkedFile{name: name, src: src, w: w, diags: diags}
}

// checkTestFile checks a test file as tqw-dsl test loads it, without
// running its cases.
func checkTestFile(name string, src []byte, opts dsl.Options) checkedFile {
	tf, diags := testfile.Load(name, src, opts)
	f := checkedFile{name: name, src: src, diags: diags}
	if f.diags == nil {
		f.diags = dsl.Diagnostics{}
	}
	if tf != nil {
		n := len(tf.Cases)
		f.cases = &n
	}
	return f
}

func readFailure(name string, err error) checkedFile {
	return checkedFile{name: name, diags: dsl.Diagnostics{{
		File: name, Line: 1, Col: 1, EndLine: 1, EndCol: 1, Severity: dsl.SeverityError, Code: dsl.CodeFileRead,
		Message: fmt.Sprintf("cannot read the file: %v", err), Hint: "check the path and its permissions",
	}}}
}
