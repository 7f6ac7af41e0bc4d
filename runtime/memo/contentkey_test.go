package memo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Equal inputs get equal keys whatever their map types: a map[string]int
// (which msgpack's SetSortMapKeys leaves in Go's random map order), also
// inside a slice and a map of maps.
func TestContentKeyIsTheSameForEqualMaps(t *testing.T) {
	in := map[string]any{
		"counts": map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8},
		"list":   []map[string]int64{{"x": 1, "y": 2, "z": 3, "w": 4}},
		"nested": map[string]map[string]bool{"p": {"q": true, "r": false, "s": true}},
	}
	first, err := ContentKey(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if k, _ := ContentKey(in); k != first {
			t.Fatalf("try %d: ContentKey of an equal input changed", i)
		}
	}
}

// The inputs whose keys were already in order (JSON-like values: maps of
// any, strings and bools, slices, scalars, structs) keep the key they had.
func TestContentKeyOfOrderedInputsIsUnchanged(t *testing.T) {
	type call struct {
		Model string
		Temp  float64
	}
	for _, in := range []any{
		map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "n": int64(2), "t": 0.5},
		map[string]string{"b": "2", "a": "1", "c": "3"},
		[]any{"x", int64(1), true, nil, []byte("raw")},
		call{Model: "m", Temp: 0.2},
		"plain",
	} {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.SetSortMapKeys(true)
		if err := enc.Encode(in); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf.Bytes())
		if got, _ := ContentKey(in); got != hex.EncodeToString(sum[:]) {
			t.Errorf("ContentKey(%#v) changed", in)
		}
	}
}
