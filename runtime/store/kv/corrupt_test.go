package kv

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// damagedStore builds a store with a checkpoint and WAL after it, then
// applies damage to the object at key.
func damagedStore(t *testing.T, key func(s *mem.Store) string, damage func([]byte) []byte) (*mem.Store, string) {
	t.Helper()
	ctx := context.Background()
	s := mem.New()
	opts := quietOpts()
	opts.DisableAutoCheckpoint = true
	db := mustOpen(t, s, opts)
	for _, k := range []string{"a", "b", "c"} {
		put(t, db, k, "before")
	}
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"d", "e"} {
		put(t, db, k, "after")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	k := key(s)
	data, _, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, k, damage(data), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return s, k
}

// lastWAL returns the newest WAL object that holds commits.
func lastWAL(s *mem.Store) string {
	objs, _ := s.List(context.Background(), "wal/", "", 0)
	return objs[len(objs)-1].Key
}

func firstChunk(s *mem.Store) string {
	objs, _ := s.List(context.Background(), "chunk/", "", 0)
	return objs[0].Key
}

func TestCorruptionStopsOpen(t *testing.T) {
	flip := func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }
	truncate := func(b []byte) []byte { return b[:len(b)-3] }
	cases := []struct {
		name   string
		key    func(*mem.Store) string
		damage func([]byte) []byte
	}{
		{"wal flipped byte", lastWAL, flip},
		{"wal truncated", lastWAL, truncate},
		{"wal header only", lastWAL, func(b []byte) []byte { return b[:10] }},
		{"chunk flipped byte", firstChunk, flip},
		{"chunk truncated", firstChunk, truncate},
		{"manifest flipped byte", func(*mem.Store) string { return "manifest" }, flip},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, key := damagedStore(t, c.key, c.damage)
			_, err := Open(context.Background(), s, quietOpts())
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), key) {
				t.Fatalf("error %q does not name %s", err, key)
			}
			if _, err := OpenReader(context.Background(), s, quietOpts()); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("OpenReader = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestEpochGoingBackwardsIsCorrupt(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, quietOpts()) // epoch 1, fence at 1
	put(t, db, "a", "1")              // wal 2
	db.Close()
	db = mustOpen(t, s, quietOpts()) // epoch 2, fence at 3
	db.Close()
	// Forge an epoch-1 object after epoch 2's fence.
	var rec recordEncoder
	rec.put([]byte("zombie"), []byte("x"))
	data := append(encodeWALHeader(false, 1, 4, [batchIDLen]byte{9}, 1), rec.appendTo(nil)...)
	if _, err := s.Put(ctx, "wal/00000000000000000004", data, objstore.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, s, quietOpts())
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "wal/00000000000000000004") {
		t.Fatalf("Open = %v, want ErrCorrupt naming wal/00000000000000000004", err)
	}
}
