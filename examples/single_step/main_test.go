package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestSingleStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	store := "file://" + filepath.ToSlash(t.TempDir())
	if err := run(ctx, []string{"--store", store, "--input", "ship it"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var ids []string
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^submitted run (\S+)$`),
		regexp.MustCompile(`(?m)^step 0 of run (\S+): "ship it"$`),
		regexp.MustCompile(`(?m)^run (\S+) succeeded: "SHIP IT"$`),
	} {
		m := want.FindAllStringSubmatch(out.String(), -1)
		if len(m) != 1 {
			t.Fatalf("want one line matching %s, got %d in:\n%s", want, len(m), out.String())
		}
		ids = append(ids, m[0][1])
	}
	if ids[0] != ids[1] || ids[0] != ids[2] {
		t.Errorf("run ids differ: %q", ids)
	}
}
