package tqwdslbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPathUsesTheSharedBinary(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "tqw-dsl")
	if err := os.WriteFile(shared, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(Env, shared)
	got, err := Path(t.TempDir())
	if err != nil || got != shared {
		t.Fatalf("Path = %q, %v; want the shared %q", got, err, shared)
	}
}

func TestPathRefusesAMissingSharedBinary(t *testing.T) {
	t.Setenv(Env, filepath.Join(t.TempDir(), "gone"))
	if _, err := Path(t.TempDir()); err == nil || !strings.Contains(err.Error(), Env+"=") {
		t.Fatalf("Path with a missing %s: %v; want an error naming it", Env, err)
	}
}
