package server_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/interpreter"
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

// TestHistoryWithDamagedOutput flips one byte of a large step output's
// object: GET /v1/runs/{id}/history says which object is damaged rather
// than serve the bytes.
func TestHistoryWithDamagedOutput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("a", 100_000))) // over interpreter.InlineOutputLimit
	}))
	defer big.Close()
	const inline = "tqw: v1\nname: big\nsteps:\n  - id: big\n    action: http\n    with: {url: \"${ input.url }\"}\n  - id: done\n    succeed: ok\n"
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: inline, RunID: "big1", Input: json.RawMessage(`{"url":"` + big.URL + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if r := f.waitState("big1", "succeeded", "failed"); r.State != "succeeded" {
		t.Fatalf("run: %+v", *r.Error)
	}
	if _, err := f.c.History(f.ctx, "big1"); err != nil {
		t.Fatalf("history of an intact run: %v", err)
	}
	objs, err := f.store.List(f.ctx, "tqw/outputs/", "", 0)
	if err != nil || len(objs) != 1 {
		t.Fatalf("large outputs: %v, %v; want one", objs, err)
	}
	key := objs[0].Key
	b, _, err := f.store.Get(f.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if _, err := f.store.Put(f.ctx, key, b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	h, err := f.c.History(f.ctx, "big1")
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 500 || ae.Code != "damaged" || !strings.Contains(ae.Message, key) {
		t.Fatalf("history with a damaged output: %+v, err %v; want HTTP 500 damaged naming %s", h, err, key)
	}
}

// TestCheckObjectsSealedSegment deletes or flips one byte of a sealed
// segment's index or data object: interpreter.CheckObjects (tqw-dsl store
// check) reports it, naming the object, as a problem or, when the runs
// cannot even be listed, as its error.
func TestCheckObjectsSealedSegment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, suffix string
		flip         bool
	}{
		{"flipped data", ".dat", true},
		{"deleted data", ".dat", false},
		{"flipped index", ".idx", true},
		{"deleted index", ".idx", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, _ := sealedRunsFixture(t, 3)
			check := func() string {
				t.Helper()
				// A fresh inspector, as tqw-dsl store check's process has:
				// the writer's caches the segment indexes it read.
				insp := runtime.NewArchiveInspector(f.rt.Queue(), f.store, runtime.SealOptions{})
				problems, err := interpreter.CheckObjects(f.ctx, f.store, interpreter.WithSealed(f.rt.Queue(), insp), insp)
				if err != nil {
					return err.Error()
				}
				var out []string
				for _, p := range problems {
					out = append(out, p.String())
				}
				return strings.Join(out, "\n")
			}
			if p := check(); p != "" {
				t.Fatalf("problems in an intact store: %v", p)
			}
			objs, err := f.store.List(f.ctx, "", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			var key string
			for _, o := range objs {
				if strings.HasSuffix(o.Key, tc.suffix) {
					key = o.Key
				}
			}
			if key == "" {
				t.Fatalf("no segment object %s in %v", tc.suffix, objs)
			}
			if tc.flip {
				b, _, err := f.store.Get(f.ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)-2] ^= 0x01
				if _, err := f.store.Put(f.ctx, key, b, objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			} else if err := f.store.Delete(f.ctx, key); err != nil {
				t.Fatal(err)
			}
			p := check()
			t.Logf("after damaging %s: %s", key, p)
			if !strings.Contains(p, key) {
				t.Fatalf("after damaging %s: %q", key, p)
			}
		})
	}
}
