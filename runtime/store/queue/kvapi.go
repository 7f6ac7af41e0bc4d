package queue

import (
	"bytes"
	"context"
	"fmt"
)

// KVGet returns the caller-KV value at key, or ErrNotFound.
func (q *Queue) KVGet(ctx context.Context, key string) ([]byte, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	return q.view.kvGet(ctx, key)
}

// KVScan returns up to limit caller-KV entries whose keys start with prefix
// and sort after startAfter, in key order. limit <= 0 means 100; at most
// 1000 are returned.
func (q *Queue) KVScan(ctx context.Context, prefix, startAfter string, limit int) ([]KVEntry, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	return q.view.kvScan(ctx, prefix, startAfter, limit)
}

// KVScanDesc is KVScan in descending key order: up to limit entries
// whose keys start with prefix and sort before startBefore (every one
// when it is ""), the greatest first.
func (q *Queue) KVScanDesc(ctx context.Context, prefix, startBefore string, limit int) ([]KVEntry, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	return q.view.kvScanDesc(ctx, prefix, startBefore, limit)
}

// KVPut writes value at key, durably.
func (q *Queue) KVPut(ctx context.Context, key string, value []byte) error {
	if err := validateKVWrites([]KVWrite{{key, value}}); err != nil {
		return err
	}
	return q.update(ctx, "KV put", true, func(t *txn) error {
		return t.put(kvKey(key), value)
	})
}

// KVDelete deletes key, durably. Deleting a missing key is not an error.
func (q *Queue) KVDelete(ctx context.Context, key string) error {
	if err := validKVKey(key); err != nil {
		return err
	}
	return q.update(ctx, "KV delete", true, func(t *txn) error {
		return t.del(kvKey(key))
	})
}

// KVCompareAndPut writes value at key if the current value equals expected,
// or, when expected is nil, if the key is absent. It reports whether it
// wrote; the write is durable before it returns.
func (q *Queue) KVCompareAndPut(ctx context.Context, key string, expected, value []byte) (bool, error) {
	if err := validateKVWrites([]KVWrite{{key, value}}); err != nil {
		return false, err
	}
	var ok bool
	err := q.update(ctx, "KV compare-and-put", true, func(t *txn) error {
		cur, exists, err := t.get(kvKey(key))
		if err != nil {
			return err
		}
		if ok = matches(cur, exists, expected); !ok {
			return nil
		}
		return t.put(kvKey(key), value)
	})
	return ok && err == nil, err
}

// KVCompareAndDelete deletes key if its current value equals expected
// (which must not be nil). It reports whether it deleted; the delete is
// durable before it returns.
func (q *Queue) KVCompareAndDelete(ctx context.Context, key string, expected []byte) (bool, error) {
	if err := validKVKey(key); err != nil {
		return false, err
	}
	if expected == nil {
		return false, invalidf("KVCompareAndDelete of %q: expected value is nil; pass the value the key must hold", key)
	}
	var ok bool
	err := q.update(ctx, "KV compare-and-delete", true, func(t *txn) error {
		cur, exists, err := t.get(kvKey(key))
		if err != nil {
			return err
		}
		if ok = matches(cur, exists, expected); !ok {
			return nil
		}
		return t.del(kvKey(key))
	})
	return ok && err == nil, err
}

func matches(cur []byte, exists bool, expected []byte) bool {
	if expected == nil {
		return !exists
	}
	return exists && bytes.Equal(cur, expected)
}

// notFoundKV is ErrNotFound naming a caller-KV key, formatted lazily: the
// runtime probes absent keys on every step.
func notFoundKV(key string) error { return &notFoundKVError{key} }

type notFoundKVError struct{ key string }

func (e *notFoundKVError) Error() string { return fmt.Sprintf("%v: KV key %q", ErrNotFound, e.key) }
func (e *notFoundKVError) Unwrap() error { return ErrNotFound }
