package counting

import (
	"context"
	"sync/atomic"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Counts is a snapshot of the counters. Every call counts, failed ones too.
type Counts struct {
	Gets, Puts, Deletes, Heads, Lists int64
	BytesRead, BytesWritten           int64
}

// Total returns the number of requests of every kind.
func (c Counts) Total() int64 { return c.Gets + c.Puts + c.Deletes + c.Heads + c.Lists }

// Sub returns c - o, the requests made between two snapshots.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Gets: c.Gets - o.Gets, Puts: c.Puts - o.Puts, Deletes: c.Deletes - o.Deletes,
		Heads: c.Heads - o.Heads, Lists: c.Lists - o.Lists,
		BytesRead: c.BytesRead - o.BytesRead, BytesWritten: c.BytesWritten - o.BytesWritten,
	}
}

// Store is a counting wrapper around another Store.
type Store struct {
	inner                          objstore.Store
	gets, puts, deletes, heads     atomic.Int64
	lists, bytesRead, bytesWritten atomic.Int64
}

var _ objstore.Store = (*Store)(nil)

// New wraps inner.
func New(inner objstore.Store) *Store { return &Store{inner: inner} }

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() objstore.Store { return s.inner }

// Counts returns the current counters.
func (s *Store) Counts() Counts {
	return Counts{
		Gets: s.gets.Load(), Puts: s.puts.Load(), Deletes: s.deletes.Load(),
		Heads: s.heads.Load(), Lists: s.lists.Load(),
		BytesRead: s.bytesRead.Load(), BytesWritten: s.bytesWritten.Load(),
	}
}

// Reset sets every counter to zero.
func (s *Store) Reset() {
	for _, c := range []*atomic.Int64{&s.gets, &s.puts, &s.deletes, &s.heads, &s.lists, &s.bytesRead, &s.bytesWritten} {
		c.Store(0)
	}
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	s.gets.Add(1)
	b, info, err := s.inner.Get(ctx, key)
	s.bytesRead.Add(int64(len(b)))
	return b, info, err
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	s.puts.Add(1)
	s.bytesWritten.Add(int64(len(data)))
	return s.inner.Put(ctx, key, data, opts)
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	s.deletes.Add(1)
	return s.inner.Delete(ctx, key)
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	s.heads.Add(1)
	return s.inner.Head(ctx, key)
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	s.lists.Add(1)
	return s.inner.List(ctx, prefix, startAfter, limit)
}
