package server_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/server/client"
)

// TestRunWithDamagedDefinition stores a run's definition object damaged
// (the bytes no longer hash to its name): GET /v1/runs/{id} says so,
// naming the object, rather than 200 with empty fields. The run is made
// by one server; a second one, whose cache is cold, reads it back.
func TestRunWithDamagedDefinition(t *testing.T) {
	t.Parallel()
	store := mem.New()
	const inline = "tqw: v1\nname: tampered\nsteps:\n  - id: done\n    succeed: 42\n"
	sum := sha256.Sum256([]byte(inline))
	key := "tqw/defs/" + hex.EncodeToString(sum[:])
	tampered := strings.Replace(inline, "42", "43", 1)
	t.Run("make the run", func(t *testing.T) {
		f := newFixtureOn(t, store, runtime.Options{})
		if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: inline, RunID: "tamper1"}); err != nil {
			t.Fatal(err)
		}
		f.waitState("tamper1", "succeeded")
		if _, err := store.Put(f.ctx, key, []byte(tampered), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	f := newFixtureOn(t, store, runtime.Options{})
	run, err := f.c.Run(f.ctx, "tamper1")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 500 || ae.Code != "damaged" || !strings.Contains(ae.Message, key) {
		t.Fatalf("GET a run whose definition is damaged: %+v, err %v; want HTTP 500 damaged naming %s", run, err, key)
	}
}
