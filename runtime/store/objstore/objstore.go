package objstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Backends wrap them so callers branch with errors.Is.
var (
	// ErrNotExist reports that no object exists at the key.
	ErrNotExist = errors.New("objstore: object does not exist")
	// ErrPrecondition reports that a conditional Put (create-only or If-Match)
	// did not hold; nothing was written.
	ErrPrecondition = errors.New("objstore: precondition failed")
	// ErrInvalidKey reports a key that is not a valid object key.
	ErrInvalidKey = errors.New("objstore: invalid key")
)

// MaxKeyLen bounds the byte length of a key. S3 allows 1024; a prefix in the
// URL takes part of that, so keys stay well below it.
const MaxKeyLen = 900

// Store is the object-store interface every durable layer of tqw goes through.
//
// Keys are slash-separated relative paths (see ValidateKey). Every method
// honors ctx: a cancelled context makes the call return ctx.Err() (wrapped)
// as soon as the backend can stop, and then no write is guaranteed to have
// happened or not happened.
type Store interface {
	// Get returns the object's bytes and its metadata, or ErrNotExist.
	Get(ctx context.Context, key string) ([]byte, ObjectInfo, error)
	// Put writes the object whole (readers never observe a partial object)
	// subject to opts' precondition, and returns the new metadata.
	// A failed precondition returns ErrPrecondition and writes nothing.
	Put(ctx context.Context, key string, data []byte, opts PutOptions) (ObjectInfo, error)
	// Delete removes the object. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Head returns the object's metadata, or ErrNotExist.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// List returns up to limit objects whose keys start with prefix and sort
	// strictly after startAfter (byte order), in ascending key order.
	// limit <= 0 means the backend's default page size (at most 1000).
	// The page is shorter than limit only when no more keys follow.
	List(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error)
}

// Packer is an optional capability of a Store: it packs the objects of one
// folder (the keys prefix+name, name without '/') into append-only log
// files, so that writing one is made durable by a single data flush of a
// file that already exists, instead of a new file, its flush, a link and a
// flush of the folder. The objects stay ordinary objects: every guarantee
// of Store holds for them, for every handle on the store in any process;
// only the cost of writing them changes. It suits many small objects
// written create-only and deleted in bulk, such as a write-ahead log.
//
// Wrappers (counting, faults) forward it when the store they wrap has it.
type Packer interface {
	// Pack makes the folder prefix ("" for the top folder, else a prefix
	// ending in '/') packed, durably and for good; it is idempotent. The
	// folder's existing objects keep working where they are. It fails with
	// an error wrapping errors.ErrUnsupported when the store cannot pack
	// (a wrapper around a store without Packer).
	Pack(ctx context.Context, prefix string) error
}

// Pack asks s to pack the folder prefix (see Packer) and reports whether
// it does: false, nil when s does not offer packing.
func Pack(ctx context.Context, s Store, prefix string) (bool, error) {
	p, ok := s.(Packer)
	if !ok {
		return false, nil
	}
	if err := p.Pack(ctx, prefix); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ETag    string // opaque version token; use it with PutOptions.IfMatch
	ModTime time.Time
}

// PutOptions carry an optional precondition. At most one of the two may be set.
type PutOptions struct {
	// IfNoneMatch makes the Put create-only (If-None-Match: *): it fails with
	// ErrPrecondition when an object already exists at the key.
	IfNoneMatch bool
	// IfMatch makes the Put succeed only while the current object's ETag
	// equals this value; a missing object fails it too.
	IfMatch string
}

// CreateOnly is the PutOptions for a create-only write.
func CreateOnly() PutOptions { return PutOptions{IfNoneMatch: true} }

// IfMatch is the PutOptions for a write conditional on the current ETag.
func IfMatch(etag string) PutOptions { return PutOptions{IfMatch: etag} }

// Validate reports whether the options are consistent.
func (o PutOptions) Validate() error {
	if o.IfNoneMatch && o.IfMatch != "" {
		return fmt.Errorf("objstore: PutOptions: IfNoneMatch and IfMatch are mutually exclusive")
	}
	return nil
}

// ValidateKey reports whether key is a valid object key: non-empty, at most
// MaxKeyLen bytes, valid UTF-8 without control characters or backslashes, no
// leading or trailing '/', no empty segment, and no '.' or '..' segment.
// A bad key is always an error; keys are never rewritten.
func ValidateKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why)
	}
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	case strings.HasPrefix(key, "/"):
		return bad("leading '/'; keys are relative")
	case strings.HasSuffix(key, "/"):
		return bad("trailing '/'")
	}
	for _, r := range key {
		if r == 0xFFFD || r < 0x20 || r == 0x7f || r == '\\' {
			return bad("control character, backslash or invalid UTF-8")
		}
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return bad("empty segment ('//')")
		case ".", "..":
			return bad("'.' or '..' segment")
		}
	}
	return nil
}

// ValidatePrefix reports whether prefix is usable with List: empty, or a
// string that would be a valid key once completed (it may end in '/').
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		return fmt.Errorf("%w prefix %q: a prefix may not be only '/'", ErrInvalidKey, prefix)
	}
	if err := ValidateKey(p); err != nil {
		return fmt.Errorf("%w (as prefix %q)", err, prefix)
	}
	return nil
}
