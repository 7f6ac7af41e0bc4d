package counting

import (
	"context"
	"sync/atomic"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Counter counts the requests made with contexts that carry it
// (WithCounter), through a Scoped store. Safe for concurrent use.
type Counter struct {
	gets, puts, deletes, heads, lists atomic.Int64
}

// Counts returns what the counter counted (bytes are not counted).
func (c *Counter) Counts() Counts {
	return Counts{Gets: c.gets.Load(), Puts: c.puts.Load(), Deletes: c.deletes.Load(), Heads: c.heads.Load(), Lists: c.lists.Load()}
}

type counterKey struct{}

// WithCounter returns ctx carrying c: requests a Scoped store makes with
// it (or a context derived from it) count in c.
func WithCounter(ctx context.Context, c *Counter) context.Context {
	return context.WithValue(ctx, counterKey{}, c)
}

func counterOf(ctx context.Context) *Counter {
	c, _ := ctx.Value(counterKey{}).(*Counter)
	return c
}

// ScopedStore counts each request in the Counter its context carries, if
// any, so one store serves many callers who each learn their own
// requests (the runtime's per-run totals). It makes no request itself.
type ScopedStore struct{ inner objstore.Store }

var _ objstore.Store = (*ScopedStore)(nil)

// Scoped wraps inner.
func Scoped(inner objstore.Store) *ScopedStore { return &ScopedStore{inner: inner} }

// Unwrap returns the wrapped store.
func (s *ScopedStore) Unwrap() objstore.Store { return s.inner }

func count(ctx context.Context, pick func(*Counter) *atomic.Int64) {
	if c := counterOf(ctx); c != nil {
		pick(c).Add(1)
	}
}

// Get implements objstore.Store.
func (s *ScopedStore) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	count(ctx, func(c *Counter) *atomic.Int64 { return &c.gets })
	return s.inner.Get(ctx, key)
}

// Put implements objstore.Store.
func (s *ScopedStore) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	count(ctx, func(c *Counter) *atomic.Int64 { return &c.puts })
	return s.inner.Put(ctx, key, data, opts)
}

// Delete implements objstore.Store.
func (s *ScopedStore) Delete(ctx context.Context, key string) error {
	count(ctx, func(c *Counter) *atomic.Int64 { return &c.deletes })
	return s.inner.Delete(ctx, key)
}

// Head implements objstore.Store.
func (s *ScopedStore) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	count(ctx, func(c *Counter) *atomic.Int64 { return &c.heads })
	return s.inner.Head(ctx, key)
}

// List implements objstore.Store.
func (s *ScopedStore) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	count(ctx, func(c *Counter) *atomic.Int64 { return &c.lists })
	return s.inner.List(ctx, prefix, startAfter, limit)
}
