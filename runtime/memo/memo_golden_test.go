package memo

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// Memo entries are found again by key: a change of ContentKey's encoding,
// of the object-key layout or of Memoized's value encoding silently
// misses every entry written before it. These fixtures fix all three; see
// docs/STORE-LAYOUT.md, "Fixtures".

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name) }

type goldenInput struct {
	Op    string
	URL   string
	Body  map[string]any
	Tries int
}

var goldenInputValue = goldenInput{Op: "http", URL: "https://example.test/x", Body: map[string]any{"b": int64(2), "a": "one", "c": []any{true, nil}}, Tries: 3}

func TestGoldenKeys(t *testing.T) {
	content, err := ContentKey(goldenInputValue)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(mem.New(), DefaultPrefix, func(string) error { return nil })
	step, err := s.Step("order-7", 3).objectKey(content)
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.Run("order-7").objectKey("token")
	if err != nil {
		t.Fatal(err)
	}
	escaped, err := s.Run("order-7").objectKey("a/b c")
	if err != nil {
		t.Fatal(err)
	}
	lines := []struct{ name, key string }{
		{"content", content},
		{"step", step},
		{"run", run},
		{"run-escaped", escaped},
		{"replay", s.ReplayKey("order-7", 3, []byte("payload"))},
	}
	var text strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&text, "%s %q\n", l.name, l.key)
	}
	golden.Check(t, goldenPath("keys.v1.txt"), []byte(text.String()))
}

type goldenValue struct {
	Status int
	Body   string
	At     time.Time
}

// TestGoldenMemoized: a value Memoized stored is read back, not computed
// again.
func TestGoldenMemoized(t *testing.T) {
	want := goldenValue{Status: 200, Body: "ok", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	ctx := context.Background()
	m := NewStore(mem.New(), DefaultPrefix, func(string) error { return nil }).Run("order-7")
	if _, err := Memoized(ctx, m, "v", func(context.Context) (goldenValue, error) { return want, nil }); err != nil {
		t.Fatal(err)
	}
	b, _, err := m.Get(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath("memoized.v1.bin"), b)

	fresh := NewStore(mem.New(), DefaultPrefix, func(string) error { return nil }).Run("order-7")
	if err := fresh.Put(ctx, "v", b); err != nil {
		t.Fatal(err)
	}
	got, err := Memoized(ctx, fresh, "v", func(context.Context) (goldenValue, error) {
		t.Fatal("the stored value was not read back")
		return goldenValue{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != want.Status || got.Body != want.Body || !got.At.Equal(want.At) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
}
