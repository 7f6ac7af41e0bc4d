package interpreter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// TestReadOutputObjectVerifies reads large outputs back: one under a key
// naming its checksum reads, and fails with ErrDamagedObject naming the
// key once a byte flips; one under a key of the older form (no checksum)
// still reads.
func TestReadOutputObjectVerifies(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	obj, err := encodeMsgpack(map[string]any{"body": strings.Repeat("a", 1000)})
	if err != nil {
		t.Fatal(err)
	}
	key := outputObjectKey("r1", 3, obj)
	old := outputObject("r1", 2)
	for _, k := range []string{key, old} {
		if _, err := store.Put(ctx, k, obj, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if v, err := readOutputObject(ctx, store, k); err != nil || v.(map[string]any)["body"] != strings.Repeat("a", 1000) {
			t.Fatalf("read %s: %v, %v", k, v, err)
		}
	}
	flipped := append([]byte(nil), obj...)
	flipped[len(flipped)-1] ^= 0x01 // still decodes: only the checksum tells
	if _, err := store.Put(ctx, key, flipped, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = readOutputObject(ctx, store, key)
	if !errors.Is(err, ErrDamagedObject) || !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), key) {
		t.Fatalf("read a flipped output: %v; want ErrDamagedObject naming %s", err, key)
	}
}
