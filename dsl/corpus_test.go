package dsl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInvalidCorpus loads every file in testdata/invalid. Each starts with
// "# want: CODE LINE:COL" and must produce that diagnostic; every error
// code must also make the file invalid.
func TestInvalidCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 60 {
		t.Fatalf("corpus has %d files; want at least 60", len(files))
	}
	codes := map[string]bool{}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var code string
			var line, col int
			first, _, _ := strings.Cut(string(src), "\n")
			if _, err := fmt.Sscanf(first, "# want: %s %d:%d", &code, &line, &col); err != nil {
				t.Fatalf("first line %q: want \"# want: CODE LINE:COL\": %v", first, err)
			}
			codes[code] = true
			w, diags, err := Parse(f, src)
			var found *Diagnostic
			for i, d := range diags {
				if d.Code == code && d.Line == line && d.Col == col {
					found = &diags[i]
				}
			}
			if found == nil {
				t.Fatalf("want %s at %d:%d; got:\n%s", code, line, col, diags)
			}
			if found.File != f || found.Message == "" {
				t.Errorf("diagnostic %+v: want file %s and a message", *found, f)
			}
			if found.Severity == SeverityError {
				if w != nil || !errors.Is(err, ErrInvalid) {
					t.Errorf("error diagnostic but Parse returned workflow %v, err %v", w != nil, err)
				}
				if !strings.HasPrefix(err.Error(), fmt.Sprintf("%s:", f)) {
					t.Errorf("error %q does not start with the file name", err)
				}
			} else if w == nil || err != nil {
				t.Errorf("only a warning expected to be fatal=false, got err %v", err)
			}
		})
	}
	// Every code the loader can emit for a file's content has a case.
	for _, c := range []string{
		CodeYAMLSyntax, CodeYAMLEmpty, CodeYAMLMultiDoc, CodeDuplicateKey, CodeAliasBound, CodeTooDeep,
		CodeMergeKey, CodeKeyType, CodeSchemaType, CodeSchemaRequired, CodeUnknownField, CodeSchemaEnum,
		CodeSchemaOneOf, CodeSchemaDuration, CodeSchemaPattern, CodeSchemaRange, CodeDuplicateID,
		CodeUnknownStep, CodeUnreachable, CodeStepConflict, CodeStepKey, CodeStepEmpty, CodeUnknownAction,
		CodeWaitNoTimeout, CodeDuration, CodeExprCompile, CodeExprStep, CodeExprNotRun, CodeSecretScope,
		CodeSecretUnknown, CodeErrorType, CodeWithSchema, CodeInputSchema,
		CodeShellUnsafe, CodeShellRawExternal, CodeShellRawMisplaced, CodeShellReservedEnv,
		CodeSetReadsAssigned, CodeExprTimeText, CodeLabelInvalid, CodeLabelScope,
	} {
		if !codes[c] {
			t.Errorf("no corpus file covers %s", c)
		}
	}
}
