package lsp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNeovim runs the server under a client nobody here wrote: Neovim's
// built-in LSP client, headless, scripted by testdata/nvim.lua to open a
// workflow, collect its diagnostics, jump to a definition, rename a step
// and request completions.
func TestNeovim(t *testing.T) {
	nvim, err := exec.LookPath("nvim")
	if err != nil {
		t.Skip("nvim is not installed (Debian package neovim): run scripts/tools.sh, which make test runs")
	}
	// The fixture with one mistake, so that there is a diagnostic.
	text := strings.Replace(fixture, "      url: \"https", "      urll: \"https", 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "nav.tqw.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	nvimPos := func(needle string, n, delta int) string {
		l, c := at(t, text, needle, n, delta)
		return fmt.Sprintf("%d,%d", l+1, c)
	}
	outFile := filepath.Join(dir, "out.json")
	script, _ := filepath.Abs("testdata/nvim.lua")
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nvim, "--headless", "--clean", "-n", "-c", "luafile "+script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"TQW_BIN="+binary, "TQW_FILE="+file, "TQW_OUT="+outFile,
		"TQW_DEF_AT="+nvimPos("on_timeout: give_up", 1, 14),
		"TQW_RENAME_AT="+nvimPos("id: give_up", 1, 6),
		"TQW_RENAME_TO=finish",
		"TQW_COMPLETE_AT="+nvimPos("when: steps.", 1, 12)+";"+nvimPos("        next: ", 1, 14),
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nvim: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatalf("nvim wrote no result: %v", err)
	}
	var res struct {
		Error       string `json:"error"`
		Diagnostics []struct {
			Lnum     int    `json:"lnum"`
			Col      int    `json:"col"`
			Message  string `json:"message"`
			Severity int    `json:"severity"`
			Code     code   `json:"code"`
			Source   string `json:"source"`
		} `json:"diagnostics"`
		Definition  []int      `json:"definition"`
		Lines       []string   `json:"lines"`
		Completions [][]string `json:"completions"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if res.Error != "" {
		t.Fatalf("the script failed: %s", res.Error)
	}
	// Diagnostics: the one mistake, where validate puts it.
	wl, wc := at(t, text, "urll", 1, 0)
	found := false
	for _, d := range res.Diagnostics {
		if strings.Contains(d.Message, `unknown field "urll"`) && d.Lnum == wl && d.Col == wc && d.Severity == 1 && d.Code == "schema.unknown-field" {
			found = true
		}
	}
	if !found {
		t.Errorf("diagnostics in Neovim: %+v; want unknown field urll at %d:%d", res.Diagnostics, wl+1, wc+1)
	}
	// Definition: the cursor is on the id of give_up.
	dl, dc := at(t, text, "id: give_up", 1, 4)
	if len(res.Definition) != 2 || res.Definition[0] != dl+1 || res.Definition[1] != dc {
		t.Errorf("after go to definition the cursor is at %v; want [%d %d]", res.Definition, dl+1, dc)
	}
	// Rename: every give_up became finish.
	renamed := strings.Join(res.Lines, "\n")
	if strings.Contains(renamed, "give_up") || strings.Count(renamed, "finish") != 4 {
		t.Errorf("buffer after rename:\n%s", renamed)
	}
	// Completion: step ids after steps. and after next:.
	if len(res.Completions) != 2 {
		t.Fatalf("completions: %v", res.Completions)
	}
	for i, labels := range res.Completions {
		for _, want := range []string{"fetch", "decide", "ask"} {
			if !slices.Contains(labels, want) {
				t.Errorf("completion %d: %q missing from %v", i, want, labels)
			}
		}
	}
}
