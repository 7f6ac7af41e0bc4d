package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// DefaultListLimit is the page size List uses when the caller gives none;
// it is also the most S3 returns in one response.
const DefaultListLimit = 1000

// Config says which bucket and prefix to use and how to reach the server.
type Config struct {
	Endpoint  string // host:port, e.g. s3.amazonaws.com or 127.0.0.1:7070
	Region    string // optional; "us-east-1" when empty
	Bucket    string
	Prefix    string // every key lives under it; "" or a valid prefix, '/' appended
	AccessKey string
	SecretKey string
	Insecure  bool // plain http instead of https

	// MaxAttempts bounds the requests one call makes (default 5).
	MaxAttempts int
	// RequestTimeout bounds one attempt (default 30s); a timed-out attempt
	// is retried while attempts and ctx allow.
	RequestTimeout time.Duration
	// BaseBackoff is the wait after the first failed attempt (default
	// 50ms); it doubles per attempt up to 2s, with jitter.
	BaseBackoff time.Duration
	// Rand supplies the jitter; nil means a randomly seeded source.
	Rand *rand.Rand
	// Transport replaces the HTTP transport (tests inject faults with it).
	Transport http.RoundTripper
}

// Store is an objstore.Store on an S3 bucket. It is safe for concurrent use.
type Store struct {
	c           *minio.Client
	bucket      string
	prefix      string
	maxAttempts int
	timeout     time.Duration
	backoff     time.Duration
	mu          sync.Mutex // guards rng
	rng         *rand.Rand
}

var _ objstore.Store = (*Store)(nil)

// New returns a store on cfg.Bucket under cfg.Prefix. It makes no request;
// a wrong endpoint, bucket or credential shows on the first call.
func New(cfg Config) (*Store, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, fmt.Errorf("s3: no endpoint: give host:port of the S3 server, e.g. s3.amazonaws.com or 127.0.0.1:7070")
	case cfg.Bucket == "":
		return nil, fmt.Errorf("s3: no bucket name")
	case cfg.AccessKey == "" || cfg.SecretKey == "":
		return nil, fmt.Errorf("s3: missing credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("s3: bucket %q: %w", cfg.Bucket, err)
	}
	prefix := cfg.Prefix
	if prefix != "" {
		if err := objstore.ValidatePrefix(prefix); err != nil {
			return nil, fmt.Errorf("s3: bucket prefix: %w", err)
		}
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       !cfg.Insecure,
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    cfg.Transport,
		MaxRetries:   1, // this package retries, so it can tell ambiguous failures apart
	})
	if err != nil {
		return nil, fmt.Errorf("s3: endpoint %q: %w", cfg.Endpoint, err)
	}
	s := &Store{c: c, bucket: cfg.Bucket, prefix: prefix, maxAttempts: cfg.MaxAttempts,
		timeout: cfg.RequestTimeout, backoff: cfg.BaseBackoff, rng: cfg.Rand}
	if s.maxAttempts <= 0 {
		s.maxAttempts = 5
	}
	if s.timeout <= 0 {
		s.timeout = 30 * time.Second
	}
	if s.backoff <= 0 {
		s.backoff = 50 * time.Millisecond
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return s, nil
}

// Bucket and Prefix report where the store's keys live.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the key prefix inside the bucket ("" or ending in '/').
func (s *Store) Prefix() string { return s.prefix }

// Client returns the underlying minio client.
func (s *Store) Client() *minio.Client { return s.c }

// retryable reports whether a failed attempt may succeed when repeated:
// server errors, throttling, conflicting conditional writes, and transport
// errors (no S3 error response, not a cancelled ctx).
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode >= 500, r.StatusCode == http.StatusTooManyRequests:
		return true
	case r.StatusCode == http.StatusConflict && r.Code == "ConditionalRequestConflict":
		return true
	case r.Code == "" && r.StatusCode == 0:
		return true // transport error or attempt timeout
	}
	return false
}

func (s *Store) wait(ctx context.Context, attempt int) error {
	d := s.backoff << min(attempt, 6)
	d = min(d, 2*time.Second)
	s.mu.Lock()
	d = d/2 + time.Duration(s.rng.Int64N(int64(d/2)+1))
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// do runs one attempt at a time, each under RequestTimeout, until it
// succeeds, fails for good, attempts run out or ctx is done. ambiguous is
// set when an earlier attempt failed in a way that may have taken effect.
func (s *Store) do(ctx context.Context, f func(ctx context.Context) error) (ambiguous bool, err error) {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, s.timeout)
		err = f(actx)
		cancel()
		if err == nil || !retryable(ctx, err) || attempt+1 >= s.maxAttempts {
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return ambiguous, err
		}
		r := minio.ToErrorResponse(err)
		ambiguous = ambiguous || r.StatusCode != http.StatusConflict
		if werr := s.wait(ctx, attempt); werr != nil {
			return ambiguous, fmt.Errorf("%w (after %v)", werr, err)
		}
	}
}

// mapErr turns an S3 error into the objstore sentinels.
func (s *Store) mapErr(op, key string, err error) error {
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed":
		return fmt.Errorf("s3: %s %q: %w", op, key, objstore.ErrPrecondition)
	case r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket" || r.Code == "NoSuchKey":
		return fmt.Errorf("s3: %s %q: %w", op, key, objstore.ErrNotExist)
	case r.Code == "NoSuchBucket":
		return fmt.Errorf("s3: %s %q: bucket %q does not exist; create it first: %w", op, key, s.bucket, err)
	}
	return fmt.Errorf("s3: %s %q: %w", op, key, err)
}

func (s *Store) info(key string, oi minio.ObjectInfo) objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: key, Size: oi.Size, ETag: oi.ETag, ModTime: oi.LastModified}
}

// Get implements objstore.Store. Cost: one GET (plus retries).
func (s *Store) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	var data []byte
	var info objstore.ObjectInfo
	core := minio.Core{Client: s.c}
	_, err := s.do(ctx, func(ctx context.Context) error {
		rc, oi, _, err := core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		if oi.Size >= 0 && int64(len(b)) != oi.Size {
			return fmt.Errorf("short body: %d of %d bytes", len(b), oi.Size)
		}
		data, info = b, s.info(key, oi)
		info.Size = int64(len(b))
		return nil
	})
	if err != nil {
		return nil, objstore.ObjectInfo{}, s.mapErr("get", key, err)
	}
	return data, info, nil
}

// Head implements objstore.Store. Cost: one HEAD (plus retries).
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	var info objstore.ObjectInfo
	_, err := s.do(ctx, func(ctx context.Context) error {
		oi, err := s.c.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
		if err != nil {
			return err
		}
		info = s.info(key, oi)
		return nil
	})
	if err != nil {
		return objstore.ObjectInfo{}, s.mapErr("head", key, err)
	}
	return info, nil
}

// Put implements objstore.Store. Cost: one PUT (plus retries). A
// conditional PUT that is retried after an attempt whose outcome is unknown
// and then fails its precondition makes one HEAD: if the object now holds
// exactly these bytes (its ETag is their MD5), the earlier attempt took
// effect and Put succeeds.
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := opts.Validate(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	po := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
	switch {
	case opts.IfNoneMatch:
		po.SetMatchETagExcept("*")
	case opts.IfMatch != "":
		po.SetMatchETag(strings.Trim(opts.IfMatch, `"`))
	}
	var info objstore.ObjectInfo
	ambiguous, err := s.do(ctx, func(ctx context.Context) error {
		ui, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), po)
		if err != nil {
			return err
		}
		info = objstore.ObjectInfo{Key: key, Size: int64(len(data)), ETag: ui.ETag, ModTime: ui.LastModified}
		return nil
	})
	if err == nil {
		if info.ModTime.IsZero() {
			// PUT responses carry no Last-Modified; a HEAD would cost a request.
			info.ModTime = time.Now().UTC()
		}
		return info, nil
	}
	mapped := s.mapErr("put", key, err)
	if opts.IfMatch != "" && errors.Is(mapped, objstore.ErrNotExist) {
		// AWS answers If-Match on a missing key with 404 NoSuchKey.
		mapped = fmt.Errorf("s3: put %q: if-match on a missing object: %w", key, objstore.ErrPrecondition)
	}
	if ambiguous && errors.Is(mapped, objstore.ErrPrecondition) {
		sum := md5.Sum(data)
		if cur, herr := s.Head(ctx, key); herr == nil && strings.Trim(cur.ETag, `"`) == hex.EncodeToString(sum[:]) {
			return cur, nil
		}
	}
	return objstore.ObjectInfo{}, mapped
}

// Delete implements objstore.Store. Cost: one DELETE (plus retries).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	_, err := s.do(ctx, func(ctx context.Context) error {
		return s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	})
	if err != nil {
		err = s.mapErr("delete", key, err)
		if errors.Is(err, objstore.ErrNotExist) {
			return nil
		}
		return err
	}
	return nil
}

// List implements objstore.Store. Cost: one ListObjectsV2 request per
// page of up to limit keys (plus retries); rarely more when the server
// returns a short truncated page.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	var out []objstore.ObjectInfo
	_, err := s.do(ctx, func(ctx context.Context) error {
		out = out[:0]
		lo := minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true, MaxKeys: limit}
		if startAfter != "" {
			lo.StartAfter = s.prefix + startAfter
		}
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := s.c.ListObjects(lctx, s.bucket, lo)
		defer func() {
			cancel()
			for range ch { // let the lister goroutine finish
			}
		}()
		for oi := range ch {
			if oi.Err != nil {
				return oi.Err
			}
			k := strings.TrimPrefix(oi.Key, s.prefix)
			if k <= startAfter || strings.HasSuffix(k, "/") {
				continue // a server that ignores StartAfter; folder markers
			}
			out = append(out, s.info(k, oi))
			if len(out) == limit {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.mapErr("list", prefix, err)
	}
	return out, nil
}
