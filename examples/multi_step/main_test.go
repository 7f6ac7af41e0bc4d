package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMultiStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	store := "file://" + filepath.ToSlash(t.TempDir())
	if err := run(ctx, []string{"--store", store, "--order", "2 chair, 1 lamp"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	// 2*40.00 + 29.99 = 109.99; tax 20% = 21.99 (cents truncated); total 131.98.
	for _, want := range []string{
		`step 0: {"text":"2 chair, 1 lamp","items":[{"name":"chair","count":2},{"name":"lamp","count":1}]}`,
		`"subtotal_cents":10999}`,
		`"tax_cents":2199}`,
		"step 3: summary: 2 items, total 131.98\n",
		"succeeded after step 3: 2 items, total 131.98\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestMultiStepBadOrderFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, []string{"--order", "2 sofa"}, &out)
	if err == nil || !strings.Contains(err.Error(), `failed: no price for "sofa"`) {
		t.Fatalf("run = %v, want a failed run naming the sofa\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "failed after step 1") {
		t.Errorf("want the run to fail at step 1:\n%s", out.String())
	}
}
