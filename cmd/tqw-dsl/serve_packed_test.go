package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tqw-dsl/tqw/server/client"
)

// TestServePacksAFreshFileStore: serve works a fresh file store through
// the same stack as worker, its WAL folder packed (objstore.Packer), so
// its commits append to the folder's log instead of each making a new
// file. Before the fix the metrics wrapper serve puts under the writer
// hid the capability, and every commit was a file of its own.
func TestServePacksAFreshFileStore(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	p, addr := startServe(t, c)
	api := client.New(addr, client.Options{})
	ctx := context.WithoutCancel(t.Context())
	for i := range 3 {
		if _, err := api.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: fmt.Sprintf("p%d", i), Input: []byte(`{"request":"disk"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, "p2 waiting", func() bool {
		run, err := api.Run(ctx, "p2")
		return err == nil && run.State == "waiting"
	})
	p.kill9()
	des, err := os.ReadDir(filepath.Join(c.dir, "store", "queue", "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	// A packed folder holds only its log (the file store's `\log`).
	if len(names) != 1 || names[0] != `\log` {
		t.Fatalf("serve's WAL folder holds %v after its commits; want only the packed log `\\log` (one data flush per commit, no file each)", names)
	}
}
