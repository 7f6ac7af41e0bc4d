package counting_test

import (
	"context"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/objstoretest"
)

func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := counting.New(mem.New())
	s.Put(ctx, "a", []byte("12345"), objstore.PutOptions{})
	s.Put(ctx, "a", []byte("x"), objstore.CreateOnly()) // failed calls count too
	s.Get(ctx, "a")
	s.Get(ctx, "missing")
	s.Head(ctx, "a")
	s.List(ctx, "", "", 0)
	s.Delete(ctx, "a")
	want := counting.Counts{Gets: 2, Puts: 2, Deletes: 1, Heads: 1, Lists: 1, BytesRead: 5, BytesWritten: 6}
	got := s.Counts()
	if got != want {
		t.Fatalf("Counts = %+v, want %+v", got, want)
	}
	if got.Total() != 7 {
		t.Fatalf("Total = %d", got.Total())
	}
	s.Get(ctx, "x")
	if d := s.Counts().Sub(got); d != (counting.Counts{Gets: 1}) {
		t.Fatalf("Sub = %+v", d)
	}
	s.Reset()
	if s.Counts() != (counting.Counts{}) {
		t.Fatal("Reset left counts")
	}
}

// The wrapper passes every call through unchanged.
func TestContract(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return counting.New(mem.New()) })
}
