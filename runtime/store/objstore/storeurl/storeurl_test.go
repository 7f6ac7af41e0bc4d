package storeurl_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

var ctx = context.Background()

func TestMem(t *testing.T) {
	a, err := storeurl.Open(ctx, "mem://urltest")
	if err != nil {
		t.Fatal(err)
	}
	if a.(*mem.Store) != mem.Named("urltest") {
		t.Fatal("mem://NAME is not the named store")
	}
}

func TestFileAbsoluteAndRelative(t *testing.T) {
	dir := t.TempDir()
	s, err := storeurl.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.(*file.Store).Root(); got != dir {
		t.Fatalf("root %q, want %q", got, dir)
	}
	if _, err := s.Put(ctx, "k", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	r, err := storeurl.Open(ctx, "file://.tqw")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*file.Store).Root(); got != filepath.Join(dir, ".tqw") {
		t.Fatalf("relative root %q", got)
	}
}

func TestS3(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
	s, err := storeurl.Open(ctx, "s3://bkt/some/prefix?endpoint=127.0.0.1:1&region=eu-west-1&insecure=1")
	if err != nil {
		t.Fatal(err)
	}
	ss := s.(*s3.Store)
	if ss.Bucket() != "bkt" || ss.Prefix() != "some/prefix/" {
		t.Fatalf("bucket %q prefix %q", ss.Bucket(), ss.Prefix())
	}
	if ss.Client().EndpointURL().Scheme != "http" {
		t.Fatal("insecure=1 did not select http")
	}
	s, err = storeurl.Open(ctx, "s3://bkt?endpoint=s3.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if s.(*s3.Store).Prefix() != "" || s.(*s3.Store).Client().EndpointURL().Scheme != "https" {
		t.Fatal("bare bucket URL: want empty prefix and https")
	}
}

func TestErrors(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
	cases := []struct{ url, want string }{
		{"", "no scheme"},
		{".tqw", "no scheme"},
		{"gs://b", "unknown scheme"},
		{"mem://", "plain name"},
		{"mem://a/b", "plain name"},
		{"file://", "no folder"},
		{"file://x?y=1", "no query"},
		{"s3://", "no bucket"},
		{"s3://b/p", "no endpoint"},
		{"s3://b/p?endpoint=h:1&insecure=maybe", "insecure=1"},
		{"s3://b/p?endpoint=h:1&secure=1", "unknown parameter"},
		{"s3://bkt/a//b?endpoint=h:1", "invalid key"},
		{"s3://b/p?endpoint=h:1", "bucket"},
	}
	for _, c := range cases {
		_, err := storeurl.Open(ctx, c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q) = %v, want error containing %q", c.url, err, c.want)
		}
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	_, err := storeurl.Open(ctx, "s3://b/p?endpoint=h:1")
	if err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("missing secret: %v", err)
	}
}
