package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// WrapStore returns inner with every request counted by op and outcome
// and timed (tqw_objstore_requests_total,
// tqw_objstore_request_duration_seconds). It adds no request and exposes
// Unwrap, so what looks through wrappers (a file store's lock) still
// finds inner.
func (m *Metrics) WrapStore(inner objstore.Store) objstore.Store {
	return &store{inner: inner, m: m}
}

type store struct {
	inner objstore.Store
	m     *Metrics
}

var _ objstore.Store = (*store)(nil)

// Unwrap returns the wrapped store.
func (s *store) Unwrap() objstore.Store { return s.inner }

func (s *store) observe(op string, start time.Time, err error) {
	s.m.storeDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	s.m.storeRequests.WithLabelValues(op, outcomeOf(err)).Inc()
}

// outcomeOf names the outcome of a request with a bounded set of values.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, objstore.ErrNotExist):
		return "not_found"
	case errors.Is(err, objstore.ErrPrecondition):
		return "precondition_failed"
	}
	return "error"
}

func (s *store) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	start := time.Now()
	b, info, err := s.inner.Get(ctx, key)
	s.observe("get", start, err)
	return b, info, err
}

func (s *store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := s.inner.Put(ctx, key, data, opts)
	s.observe("put", start, err)
	return info, err
}

func (s *store) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := s.inner.Delete(ctx, key)
	s.observe("delete", start, err)
	return err
}

func (s *store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := s.inner.Head(ctx, key)
	s.observe("head", start, err)
	return info, err
}

func (s *store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	start := time.Now()
	page, err := s.inner.List(ctx, prefix, startAfter, limit)
	s.observe("list", start, err)
	return page, err
}
