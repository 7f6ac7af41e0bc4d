package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
)

const forms = "write mem://NAME, file://PATH (file://.tqw or file:///abs/dir) or s3://BUCKET/PREFIX?endpoint=HOST:PORT"

// Sentinel errors.
var (
	// ErrInvalid reports a URL that names no store (no or an unknown
	// scheme, a malformed URL, an unknown parameter) or a store that
	// cannot be used as configured (s3 credentials missing from the
	// environment). Nothing was tried: the URL or the environment must
	// change.
	ErrInvalid = errors.New("storeurl: invalid store URL")
	// ErrNoStore reports that OpenReadOnly found nothing at the URL: the
	// folder does not exist or the store holds no object. The error is a
	// *NoStoreError.
	ErrNoStore = errors.New("storeurl: no store at the URL")
	// ErrReadOnly reports a Put or Delete on a store OpenReadOnly
	// returned; nothing was written.
	ErrReadOnly = file.ErrReadOnly
)

// invalidError is an ErrInvalid with its own message.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// NoStoreError is OpenReadOnly's error for a URL at which nothing is
// stored. It matches ErrNoStore.
type NoStoreError struct {
	URL string
	// Reason says what was found instead, e.g. "the folder /x does not exist".
	Reason string
}

func (e *NoStoreError) Error() string        { return "no store at " + e.URL + ": " + e.Reason }
func (e *NoStoreError) Is(target error) bool { return target == ErrNoStore }

// Open returns the store the URL names, for reading and writing. ctx is
// unused today: no backend makes a request on open. A file store's folder
// is created when missing. Errors about the URL itself wrap ErrInvalid.
func Open(ctx context.Context, rawURL string) (objstore.Store, error) {
	_ = ctx
	return open(rawURL, false)
}

// OpenReadOnly returns the store the URL names for reading only: it
// creates nothing, changes nothing (a file store is opened with
// file.OpenReadOnly: no folder, lock file or temp-file sweep), and every
// Put and Delete on it fails with ErrReadOnly. A URL at which nothing is
// stored (a missing folder, a store without any object: a typo in the
// URL, or a mem:// store of another process) fails with a *NoStoreError.
// Cost: one LIST of at most one object.
func OpenReadOnly(ctx context.Context, rawURL string) (objstore.Store, error) {
	s, err := open(rawURL, true)
	if err != nil {
		return nil, err
	}
	page, err := s.List(ctx, "", "", 1)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", rawURL, err)
	}
	if len(page) > 0 {
		return s, nil
	}
	reason := "it holds no object"
	switch st := s.(type) {
	case *file.ReadOnly:
		reason = "the folder " + st.Root() + " holds no object"
	case readOnlyStore:
		if _, ok := st.Store.(*mem.Store); ok {
			reason = "it holds no object in this process (a mem:// store lives only in the process that made it)"
		} else if s3s, ok := st.Store.(*s3.Store); ok {
			reason = fmt.Sprintf("bucket %s holds no object under the prefix %q", s3s.Bucket(), s3s.Prefix())
		}
	}
	return nil, &NoStoreError{URL: rawURL, Reason: reason}
}

func open(rawURL string, readOnly bool) (objstore.Store, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, invalidf("store URL %q has no scheme: %s", rawURL, forms)
	}
	var s objstore.Store
	var err error
	switch scheme {
	case "mem":
		if rest == "" || strings.ContainsAny(rest, "/?#") {
			return nil, invalidf("store URL %q: write mem://NAME with a plain name, e.g. mem://test", rawURL)
		}
		s = mem.Named(rest)
	case "file":
		return openFile(rawURL, rest, readOnly)
	case "s3":
		s, err = openS3(rawURL)
	default:
		return nil, invalidf("store URL %q: unknown scheme %q: %s", rawURL, scheme, forms)
	}
	if err != nil || !readOnly {
		return s, err
	}
	return readOnlyStore{s}, nil
}

// openFile takes the path verbatim after "file://" so relative paths work
// (file://.tqw); "file:///tmp/x" is the absolute /tmp/x.
func openFile(rawURL, path string, readOnly bool) (objstore.Store, error) {
	if path == "" {
		return nil, invalidf("store URL %q: no folder: write file://.tqw (relative) or file:///tmp/x (absolute)", rawURL)
	}
	if strings.ContainsAny(path, "?#") {
		return nil, invalidf("store URL %q: a file URL takes no query or fragment: write file://PATH", rawURL)
	}
	if strings.HasPrefix(path, "localhost/") {
		path = strings.TrimPrefix(path, "localhost")
	}
	if readOnly {
		s, err := file.OpenReadOnly(path)
		if errors.Is(err, file.ErrNoFolder) {
			root, _ := filepath.Abs(path)
			why := "does not exist"
			if fi, serr := os.Stat(root); serr == nil && !fi.IsDir() {
				why = "is not a folder"
			}
			return nil, &NoStoreError{URL: rawURL, Reason: "the folder " + root + " " + why}
		}
		if err != nil {
			return nil, fmt.Errorf("store URL %q: %w", rawURL, err)
		}
		return s, nil
	}
	s, err := file.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", rawURL, err)
	}
	return s, nil
}

// readOnlyStore refuses every write to the store it wraps.
type readOnlyStore struct{ objstore.Store }

func (r readOnlyStore) Put(_ context.Context, key string, _ []byte, _ objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, fmt.Errorf("put %q: %w", key, ErrReadOnly)
}

func (r readOnlyStore) Delete(_ context.Context, key string) error {
	return fmt.Errorf("delete %q: %w", key, ErrReadOnly)
}

func openS3(rawURL string) (objstore.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, invalidf("store URL %q: %v: %s", rawURL, err, forms)
	}
	if u.Host == "" {
		return nil, invalidf("store URL %q: no bucket: write s3://BUCKET/PREFIX?endpoint=HOST:PORT", rawURL)
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "insecure":
		default:
			return nil, invalidf("store URL %q: unknown parameter %q: use endpoint, region and insecure", rawURL, k)
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		return nil, invalidf("store URL %q: no endpoint: add ?endpoint=HOST:PORT, e.g. ?endpoint=s3.amazonaws.com or ?endpoint=127.0.0.1:7070&insecure=1", rawURL)
	}
	insecure := false
	switch q.Get("insecure") {
	case "", "0", "false":
	case "1", "true":
		insecure = true
	default:
		return nil, invalidf("store URL %q: insecure=%q: write insecure=1 for plain http or leave it out for https", rawURL, q.Get("insecure"))
	}
	ak, sk := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if ak == "" || sk == "" {
		return nil, invalidf("store URL %q: missing credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment", rawURL)
	}
	s, err := s3.New(s3.Config{
		Endpoint: endpoint, Region: q.Get("region"), Bucket: u.Host,
		Prefix: strings.TrimPrefix(u.Path, "/"), AccessKey: ak, SecretKey: sk, Insecure: insecure,
	})
	if err != nil {
		// s3.New makes no request: its errors are about the configuration.
		return nil, &invalidError{msg: fmt.Sprintf("store URL %q: %v", rawURL, err)}
	}
	return s, nil
}
