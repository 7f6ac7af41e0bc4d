package storeurl_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// checkReadOnly checks that s reads key as want and refuses writes.
func checkReadOnly(t *testing.T, s objstore.Store, key, want string) {
	t.Helper()
	if b, _, err := s.Get(ctx, key); err != nil || string(b) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, b, err, want)
	}
	if _, err := s.Put(ctx, key, []byte("changed"), objstore.PutOptions{}); !errors.Is(err, storeurl.ErrReadOnly) {
		t.Errorf("Put: %v, want ErrReadOnly", err)
	}
	if _, err := s.Put(ctx, "new", []byte("x"), objstore.CreateOnly()); !errors.Is(err, storeurl.ErrReadOnly) {
		t.Errorf("create-only Put: %v, want ErrReadOnly", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, storeurl.ErrReadOnly) {
		t.Errorf("Delete: %v, want ErrReadOnly", err)
	}
	if b, _, err := s.Get(ctx, key); err != nil || string(b) != want {
		t.Fatalf("after the refused writes Get(%q) = %q, %v", key, b, err)
	}
}

func TestOpenReadOnlyFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "stroe")
	_, err := storeurl.OpenReadOnly(ctx, "file://"+missing)
	var ns *storeurl.NoStoreError
	if !errors.As(err, &ns) || !errors.Is(err, storeurl.ErrNoStore) || ns.URL != "file://"+missing || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Fatalf("missing folder: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenReadOnly created the folder: %v", err)
	}

	// A folder with nothing stored in it is no store either.
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := storeurl.OpenReadOnly(ctx, "file://"+empty); !errors.Is(err, storeurl.ErrNoStore) || !strings.Contains(err.Error(), "holds no object") {
		t.Fatalf("empty folder: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Fatalf("OpenReadOnly wrote into the empty folder: %v", ents)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := storeurl.OpenReadOnly(ctx, "file://"+filepath.Join(dir, "plain")); !errors.Is(err, storeurl.ErrNoStore) || !strings.Contains(err.Error(), "is not a folder") {
		t.Fatalf("a file as the folder: %v", err)
	}

	full := filepath.Join(dir, "full")
	w, err := storeurl.Open(ctx, "file://"+full)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, "a/b", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := storeurl.OpenReadOnly(ctx, "file://"+full)
	if err != nil {
		t.Fatal(err)
	}
	checkReadOnly(t, r, "a/b", "v")
}

func TestOpenReadOnlyMem(t *testing.T) {
	_, err := storeurl.OpenReadOnly(ctx, "mem://ro-empty")
	if !errors.Is(err, storeurl.ErrNoStore) || !strings.Contains(err.Error(), "only in the process that made it") {
		t.Fatalf("empty mem store: %v", err)
	}
	if _, err := mem.Named("ro-full").Put(ctx, "k", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := storeurl.OpenReadOnly(ctx, "mem://ro-full")
	if err != nil {
		t.Fatal(err)
	}
	checkReadOnly(t, r, "k", "v")
}

func TestOpenReadOnlyS3(t *testing.T) {
	cfg := s3test.Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	url := "s3://" + cfg.Bucket + "/" + cfg.Prefix + "?endpoint=" + cfg.Endpoint + "&insecure=1"
	if _, err := storeurl.OpenReadOnly(ctx, url); !errors.Is(err, storeurl.ErrNoStore) || !strings.Contains(err.Error(), "holds no object under the prefix") {
		t.Fatalf("empty prefix: %v", err)
	}
	w, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, "k", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := storeurl.OpenReadOnly(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	checkReadOnly(t, r, "k", "v")
}

// TestInvalidURLs checks that every error about the URL itself wraps
// ErrInvalid, for both opens, and that a store failing to open does not.
func TestInvalidURLs(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	for _, url := range []string{"", ".tqw", "gs://b", "mem://", "mem://a/b", "file://", "file://x?y=1", "s3://", "s3://b/p",
		"s3://b/p?endpoint=h:1&insecure=maybe", "s3://b/p?endpoint=h:1&secure=1", "s3://b/p?endpoint=h:1", "s3://b%zz/p"} {
		for name, open := range map[string]func() error{
			"Open":         func() error { _, err := storeurl.Open(ctx, url); return err },
			"OpenReadOnly": func() error { _, err := storeurl.OpenReadOnly(ctx, url); return err },
		} {
			if err := open(); !errors.Is(err, storeurl.ErrInvalid) {
				t.Errorf("%s(%q) = %v, want ErrInvalid", name, url, err)
			}
		}
	}
	// A folder that cannot be created is an I/O failure, not a bad URL.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := storeurl.Open(ctx, "file://"+filepath.Join(blocker, "store"))
	if err == nil || errors.Is(err, storeurl.ErrInvalid) {
		t.Fatalf("Open under a file: %v, want an error that is not ErrInvalid", err)
	}
}
