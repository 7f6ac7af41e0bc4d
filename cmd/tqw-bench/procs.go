package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
)

// tqwDSL returns the tqw-dsl binary the process benchmarks start: the
// one given with --tqw-dsl, or one built from the checkout into dir.
func tqwDSL(ctx context.Context, given, dir string) (string, error) {
	if given != "" {
		return given, nil
	}
	bin := filepath.Join(dir, "tqw-dsl")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tqw-dsl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building tqw-dsl (run from the repository root or pass --tqw-dsl): %v\n%s", err, out)
	}
	return bin, nil
}

// awaitLine reads a child's stderr until find recognises a line, returns
// what find extracted from it, and drains the rest in the background so
// the child never blocks on a full pipe. what names the awaited line in
// the error when the child exits first; the lines seen are quoted.
func awaitLine(r io.Reader, what string, find func(line string) (string, bool)) (string, error) {
	sc := bufio.NewScanner(r)
	var seen []string
	for sc.Scan() {
		if v, ok := find(sc.Text()); ok {
			go func() { _, _ = io.Copy(io.Discard, r) }()
			return v, nil
		}
		seen = append(seen, sc.Text())
	}
	return "", fmt.Errorf("the process exited before it said %s:\n%s", what, strings.Join(seen, "\n"))
}
