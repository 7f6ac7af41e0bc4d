package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// bigOutputWorkflow prints more than interpreter.InlineOutputLimit, so
// its step's output lives in its own object.
const bigOutputWorkflow = `tqw: v1
name: big
steps:
  - id: big
    action: shell
    with: {command: "head -c 100000 /dev/zero | tr '\\0' a"}
  - id: done
    succeed: ok
`

// storeObjects lists the keys under prefix in the file store at root.
func storeObjects(t *testing.T, root, prefix string) []string {
	t.Helper()
	r, err := file.OpenReadOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	infos, err := r.List(context.Background(), prefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
	}
	return keys
}

// damageObject deletes key (flip false) or flips one byte of it, through
// the store: the file store packs objects into its own log.
func damageObject(t *testing.T, root, key string, flip bool) {
	t.Helper()
	s, err := file.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if !flip {
		if err := s.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, _, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if _, err := s.Put(ctx, key, b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestStoreCheckRunObjects damages each kind of object the runs keep
// beside the kv, in a store made by a real run: store check exits 1
// naming it, and history refuses a damaged output rather than print it.
func TestStoreCheckRunObjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prefix string
		flip         bool
	}{
		{"deleted output", "tqw/outputs/", false},
		{"flipped output", "tqw/outputs/", true},
		{"deleted definition", "tqw/defs/", false},
		{"flipped definition", "tqw/defs/", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			wf := filepath.Join(c.dir, "big.yaml")
			if err := os.WriteFile(wf, []byte(bigOutputWorkflow), 0o644); err != nil {
				t.Fatal(err)
			}
			c.must(0, "run", wf, "--run-id", "big1")
			c.must(0, "store", "check")
			root := filepath.Join(c.dir, "store")
			keys := storeObjects(t, root, tc.prefix)
			if len(keys) != 1 {
				t.Fatalf("objects under %s: %v, want one", tc.prefix, keys)
			}
			damageObject(t, root, keys[0], tc.flip)
			out, _ := c.must(exitFailed, "store", "check")
			want := keys[0] + ": "
			if !strings.Contains(out, want) {
				t.Fatalf("store check does not name %s:\n%s", keys[0], out)
			}
			if tc.prefix == "tqw/outputs/" {
				code, out, errOut := c.run("history", "big1")
				if code == 0 || !strings.Contains(errOut, keys[0]) || strings.Contains(out, "aaaa") {
					t.Fatalf("history of a run with a damaged output: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
			}
		})
	}
}
