package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
)

// fakeS3 answers each request with the next status in script (the last
// one repeats); 200 answers carry an ETag.
type fakeS3 struct {
	mu     sync.Mutex
	script []int
	code   string // S3 error code sent with error statuses
	calls  atomic.Int64
	onCall func(n int64)
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	if f.onCall != nil {
		f.onCall(n)
	}
	f.mu.Lock()
	status := f.script[min(int(n)-1, len(f.script)-1)]
	f.mu.Unlock()
	if status == http.StatusOK {
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>scripted</Message></Error>`, f.code)
}

func fakeStore(t *testing.T, f *fakeS3, attempts int, backoff time.Duration) *s3.Store {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s, err := s3.New(s3.Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "bkt", Prefix: "p",
		AccessKey: "ak", SecretKey: "sk", Insecure: true,
		MaxAttempts: attempts, BaseBackoff: backoff, Rand: rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRetryThenSuccess(t *testing.T) {
	f := &fakeS3{script: []int{503, 500, 200}, code: "SlowDown"}
	s := fakeStore(t, f, 5, time.Millisecond)
	info, err := s.Put(context.Background(), "k", []byte("x"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 3 || info.ETag == "" {
		t.Fatalf("%d requests, info %+v; want 3 requests and an ETag", f.calls.Load(), info)
	}
}

func TestRetriesBounded(t *testing.T) {
	f := &fakeS3{script: []int{503}, code: "ServiceUnavailable"}
	s := fakeStore(t, f, 4, time.Millisecond)
	_, _, err := s.Get(context.Background(), "k")
	if err == nil || f.calls.Load() != 4 {
		t.Fatalf("Get = %v after %d requests; want an error after 4", err, f.calls.Load())
	}
}

func TestConditionalConflictRetried(t *testing.T) {
	f := &fakeS3{script: []int{409, 200}, code: "ConditionalRequestConflict"}
	s := fakeStore(t, f, 3, time.Millisecond)
	if _, err := s.Put(context.Background(), "k", []byte("x"), objstore.CreateOnly()); err != nil || f.calls.Load() != 2 {
		t.Fatalf("Put = %v after %d requests; want success after 2", err, f.calls.Load())
	}
}

func TestNoRetryOnPrecondition(t *testing.T) {
	f := &fakeS3{script: []int{412}, code: "PreconditionFailed"}
	s := fakeStore(t, f, 5, time.Millisecond)
	_, err := s.Put(context.Background(), "k", []byte("x"), objstore.CreateOnly())
	if !errors.Is(err, objstore.ErrPrecondition) || f.calls.Load() != 1 {
		t.Fatalf("Put = %v after %d requests; want ErrPrecondition after 1", err, f.calls.Load())
	}
}

func TestNotFound(t *testing.T) {
	f := &fakeS3{script: []int{404}, code: "NoSuchKey"}
	s := fakeStore(t, f, 5, time.Millisecond)
	if _, _, err := s.Get(context.Background(), "k"); !errors.Is(err, objstore.ErrNotExist) || f.calls.Load() != 1 {
		t.Fatalf("Get = %v after %d requests; want ErrNotExist after 1", err, f.calls.Load())
	}
}

func TestBackoffHonorsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeS3{script: []int{503}, code: "SlowDown", onCall: func(int64) { cancel() }}
	s := fakeStore(t, f, 5, time.Hour)
	_, err := s.Put(ctx, "k", []byte("x"), objstore.PutOptions{})
	if !errors.Is(err, context.Canceled) || f.calls.Load() != 1 {
		t.Fatalf("Put = %v after %d requests; want context.Canceled after 1", err, f.calls.Load())
	}
}

// loseFirstPut performs the first PUT and then reports a transport error,
// as if the connection dropped before the response arrived.
type loseFirstPut struct {
	inner http.RoundTripper
	lost  atomic.Bool
}

func (l *loseFirstPut) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.inner.RoundTrip(r)
	if err == nil && r.Method == http.MethodPut && l.lost.CompareAndSwap(false, true) {
		resp.Body.Close()
		return nil, errors.New("connection reset (injected after the PUT was performed)")
	}
	return resp, err
}

// TestLostResponseConditionalPut needs the real server: a create-only PUT
// whose response is lost is retried, the retry fails its precondition, and
// Put still reports success because the object holds exactly its bytes.
func TestLostResponseConditionalPut(t *testing.T) {
	cfg := testConfig(t)
	tr := &loseFirstPut{inner: http.DefaultTransport}
	cfg.Transport, cfg.BaseBackoff = tr, time.Millisecond
	s, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := bytes.Repeat([]byte("lost"), 1000)
	if _, err := s.Put(ctx, "k", data, objstore.CreateOnly()); err != nil {
		t.Fatalf("create-only Put with a lost response = %v, want success", err)
	}
	if !tr.lost.Load() {
		t.Fatal("no response was lost")
	}
	// A different writer's bytes are still a real precondition failure.
	tr.lost.Store(false)
	if _, err := s.Put(ctx, "k", []byte("other"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("second create-only Put = %v, want ErrPrecondition", err)
	}
	b, _, err := s.Get(ctx, "k")
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("Get = %d bytes, %v", len(b), err)
	}
}

func TestNewErrors(t *testing.T) {
	for _, cfg := range []s3.Config{
		{Bucket: "b", AccessKey: "a", SecretKey: "s"},
		{Endpoint: "h:1", AccessKey: "a", SecretKey: "s"},
		{Endpoint: "h:1", Bucket: "b", AccessKey: "a"},
		{Endpoint: "h:1", Bucket: "b", AccessKey: "a", SecretKey: "s", Prefix: "/x"},
	} {
		if _, err := s3.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
