package server_test

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/server/client"
)

// A run exported through the API imports into another server's store
// once; an altered or foreign document is refused and writes nothing.
func TestExportAndImportThroughTheAPI(t *testing.T) {
	src := newFixture(t)
	ctx := src.ctx
	if _, err := src.c.Submit(ctx, client.SubmitRequest{Workflow: "chain.yaml", RunID: "mv1"}); err != nil {
		t.Fatal(err)
	}
	src.waitState("mv1", "waiting")
	if _, err := src.c.Signal(ctx, "go:mv1", []byte(`{}`), false); err != nil {
		t.Fatal(err)
	}
	src.waitState("mv1", "succeeded")
	ex, err := src.c.Export(ctx, "mv1")
	if err != nil {
		t.Fatal(err)
	}
	if ex.RunID != "mv1" || ex.Files["manifest.json"] == nil || ex.Files["records.jsonl"] == nil {
		t.Fatalf("export holds %d files for %q; want manifest.json and records.jsonl of mv1", len(ex.Files), ex.RunID)
	}
	if _, err := src.c.Export(ctx, "nosuch"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("export of an unknown run: %v", err)
	}

	dst := newFixture(t)
	var ce *client.Error
	altered := client.RunExport{RunID: ex.RunID, Files: map[string][]byte{}}
	for p, b := range ex.Files {
		altered.Files[p] = b
	}
	altered.Files["records.jsonl"] = append(append([]byte{}, ex.Files["records.jsonl"]...), '\n')
	if _, err := dst.c.Import(ctx, altered); !errors.As(err, &ce) || ce.Status != 422 || ce.Code != "damaged_export" {
		t.Fatalf("import of an altered export: %v", err)
	}
	if _, err := dst.c.Import(ctx, client.RunExport{RunID: "other", Files: ex.Files}); !errors.As(err, &ce) || ce.Status != 422 || ce.Field != "run_id" {
		t.Fatalf("import under another run id: %v", err)
	}
	// The refusals wrote nothing: the whole document imports once.
	got, err := dst.c.Import(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	if got.RunID != "mv1" {
		t.Fatalf("imported %q; want mv1", got.RunID)
	}
	if _, err := dst.c.Import(ctx, ex); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a second import of mv1: %v", err)
	}
}
