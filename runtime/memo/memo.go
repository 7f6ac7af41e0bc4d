package memo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// DefaultPrefix is the object-key prefix of memo and replay entries.
const DefaultPrefix = "workflow-memo"

// ErrInvalidKey reports an empty or oversized memo key; the runtime
// reports invalid KV keys with the same sentinel (runtime.ErrInvalidKey).
var ErrInvalidKey = errors.New("runtime: invalid key")

// Memo is a durable key-value cache scoped to one step of a run
// (Step.Memo) or to the whole run (Step.RunMemo). It makes a retried step
// observe the result of an expensive side effect instead of paying twice.
// It is a cache: every reader must tolerate absence by recomputing, since
// retention may remove entries.
//
// Each entry is one object, <prefix>/<run>/s/<step>/<key> for a step memo
// and <prefix>/<run>/r/<key> for the run memo: Get costs one GET, Put one
// PUT. Safe for concurrent use.
type Memo struct {
	store objstore.Store
	base  string // object-key prefix ending in "/"
}

// memoKeySegment maps a memo key to one object-key segment. Keys made of
// [A-Za-z0-9._-] (not "." or "..") are used as they are; others become "~"
// and their hex encoding, which no plain key can collide with.
func memoKeySegment(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty memo key", ErrInvalidKey)
	}
	plain := key != "." && key != ".." && len(key) <= 200
	for i := 0; plain && i < len(key); i++ {
		c := key[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if plain {
		return key, nil
	}
	if len(key) > 300 {
		return "", fmt.Errorf("%w: memo key of %d bytes; the limit is 300 (use ContentKey for long inputs)", ErrInvalidKey, len(key))
	}
	return "~" + hex.EncodeToString([]byte(key)), nil
}

func (m *Memo) objectKey(key string) (string, error) {
	seg, err := memoKeySegment(key)
	if err != nil {
		return "", err
	}
	return m.base + seg, nil
}

// Get returns the value stored under key, or found == false.
func (m *Memo) Get(ctx context.Context, key string) (value []byte, found bool, err error) {
	k, err := m.objectKey(key)
	if err != nil {
		return nil, false, err
	}
	b, _, err := m.store.Get(ctx, k)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("runtime: memo get %q: %w", key, err)
	}
	return b, true, nil
}

// Put stores value under key, replacing any earlier value. It returns once
// the value is durable.
func (m *Memo) Put(ctx context.Context, key string, value []byte) error {
	k, err := m.objectKey(key)
	if err != nil {
		return err
	}
	if _, err := m.store.Put(ctx, k, value, objstore.PutOptions{}); err != nil {
		return fmt.Errorf("runtime: memo put %q: %w", key, err)
	}
	return nil
}

// ContentKey returns the memo key derived from input: the hex SHA-256 of
// its MessagePack encoding (struct fields by name in declaration order,
// the keys of every string-keyed map in order, at any depth through maps,
// slices and arrays; a map inside a struct field is in order only when it
// is a map[string]any, map[string]string or map[string]bool). Include an
// operation name in input when different operations may see equal inputs.
func ContentKey(input any) (string, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(ordered(reflect.ValueOf(input))); err != nil {
		return "", fmt.Errorf("runtime: content key: encode %T as MessagePack: %w", input, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// ordered returns v with each string-keyed map, through maps, slices and
// arrays, as a map[string]any of its values as they are, which the
// encoder writes in key order with the bytes it would write for each
// value: msgpack's SetSortMapKeys orders only map[string]any,
// map[string]string and map[string]bool, so a map[string]int came out in
// Go's random map order and equal inputs could get different keys. Byte
// slices, structs and values with their own encoding stay as they are.
func ordered(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if v.Type().Implements(customEncoder) || v.Type().Implements(marshaler) {
		return v.Interface()
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return ordered(v.Elem())
	case reflect.Map:
		if v.IsNil() || v.Type().Key().Kind() != reflect.String {
			return v.Interface()
		}
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			m[it.Key().String()] = ordered(it.Value())
		}
		return m
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 || v.Kind() == reflect.Slice && v.IsNil() {
			return v.Interface()
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = ordered(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

var (
	customEncoder = reflect.TypeFor[msgpack.CustomEncoder]()
	marshaler     = reflect.TypeFor[msgpack.Marshaler]()
)

// ContentKey is the package function ContentKey, for symmetry with
// ContentGet and ContentPut.
func (m *Memo) ContentKey(input any) (string, error) { return ContentKey(input) }

// ContentGet is Get under ContentKey(input).
func (m *Memo) ContentGet(ctx context.Context, input any) ([]byte, bool, error) {
	k, err := ContentKey(input)
	if err != nil {
		return nil, false, err
	}
	return m.Get(ctx, k)
}

// ContentPut is Put under ContentKey(input).
func (m *Memo) ContentPut(ctx context.Context, input any, value []byte) error {
	k, err := ContentKey(input)
	if err != nil {
		return err
	}
	return m.Put(ctx, k, value)
}

// Memoized returns the value stored under key, or runs compute, stores its
// value (MessagePack, fields by name) and returns it. An entry that fails to
// decode counts as absent and is overwritten. An error from compute stores
// nothing and is returned as is. When the value was computed but could not
// be stored, Memoized returns the value together with the storage error.
func Memoized[T any](ctx context.Context, m *Memo, key string, compute func(context.Context) (T, error)) (T, error) {
	var zero T
	if b, found, err := m.Get(ctx, key); err != nil {
		return zero, err
	} else if found {
		var v T
		if msgpackcheck.Unmarshal(b, &v, msgpackcheck.Options{MaxDepth: msgpackcheck.MaxDepth, Timestamps: true}) == nil {
			return v, nil
		}
	}
	v, err := compute(ctx)
	if err != nil {
		return zero, err
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return v, fmt.Errorf("runtime: memoize %q: encode %T: %w", key, v, err)
	}
	return v, m.Put(ctx, key, b)
}

// MemoizedByContent is Memoized under ContentKey(input).
func MemoizedByContent[T any](ctx context.Context, m *Memo, input any, compute func(context.Context) (T, error)) (T, error) {
	k, err := ContentKey(input)
	if err != nil {
		var zero T
		return zero, err
	}
	return Memoized(ctx, m, k, compute)
}

// Store addresses every memo and replay entry of the runtime's object
// store (Runtime.MemoStore), for cleanup policies beyond the built-in
// retention sweep.
type Store struct {
	store      objstore.Store
	prefix     string
	validRunID func(string) error
}

// NewStore returns the memo entries under prefix in store. validRunID
// checks a run id before ClearRun touches the objects under it (the
// runtime passes runstate.ValidateRunID).
func NewStore(store objstore.Store, prefix string, validRunID func(string) error) *Store {
	return &Store{store: store, prefix: prefix, validRunID: validRunID}
}

// Step returns the memo of step n of runID, as Step.Memo sees it.
func (s *Store) Step(runID string, n int) *Memo {
	return &Memo{store: s.store, base: s.prefix + "/" + runID + "/s/" + strconv.Itoa(n) + "/"}
}

// Run returns the run memo of runID, as Step.RunMemo sees it.
func (s *Store) Run(runID string) *Memo {
	return &Memo{store: s.store, base: s.prefix + "/" + runID + "/r/"}
}

// ClearRun deletes every memo and replay entry of runID and returns how many
// objects it deleted. Cost: one LIST per 1000 entries plus one DELETE each.
func (s *Store) ClearRun(ctx context.Context, runID string) (int, error) {
	if err := s.validRunID(runID); err != nil {
		return 0, err
	}
	prefix := s.prefix + "/" + runID + "/"
	deleted, after := 0, ""
	for {
		page, err := s.store.List(ctx, prefix, after, 1000)
		if err != nil {
			return deleted, fmt.Errorf("runtime: list memo entries of run %s: %w", runID, err)
		}
		for _, o := range page {
			if err := s.store.Delete(ctx, o.Key); err != nil {
				return deleted, fmt.Errorf("runtime: delete memo entry %s: %w", o.Key, err)
			}
			deleted++
		}
		if len(page) < 1000 {
			return deleted, nil
		}
		after = page[len(page)-1].Key
	}
}

// RunEntries returns the run memo entries of runID (Run), by memo key,
// for moving a run elsewhere (tqw-dsl export). Cost: one LIST per 1,000
// entries plus one GET each.
func (s *Store) RunEntries(ctx context.Context, runID string) (map[string][]byte, error) {
	if err := s.validRunID(runID); err != nil {
		return nil, err
	}
	prefix := s.prefix + "/" + runID + "/r/"
	out := map[string][]byte{}
	after := ""
	for {
		page, err := s.store.List(ctx, prefix, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("runtime: list memo entries of run %s: %w", runID, err)
		}
		for _, o := range page {
			seg := o.Key[len(prefix):]
			key := seg
			if hexed, ok := strings.CutPrefix(seg, "~"); ok {
				b, err := hex.DecodeString(hexed)
				if err != nil {
					continue // not an entry Put wrote
				}
				key = string(b)
			}
			b, _, err := s.store.Get(ctx, o.Key)
			if errors.Is(err, objstore.ErrNotExist) {
				continue // expired meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("runtime: read memo entry %s: %w", o.Key, err)
			}
			out[key] = b
		}
		if len(page) < 1000 {
			return out, nil
		}
		after = page[len(page)-1].Key
	}
}

// ReplayKey is the object key of the replay record of step n of runID
// with payload (Options.StepOutputReplay of the runtime).
func (s *Store) ReplayKey(runID string, n int, payload []byte) string {
	sum := sha256.Sum256(payload)
	return s.prefix + "/" + runID + "/x/" + strconv.Itoa(n) + "/" + hex.EncodeToString(sum[:])
}
