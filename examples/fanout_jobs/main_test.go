package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFanOutIsNotRepeatedByARetry(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("body of " + r.URL.Path))
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	store := "file://" + filepath.ToSlash(t.TempDir())
	err := run(ctx, []string{"--store", store, "--run-id", "crawl-1",
		srv.URL + "/a", srv.URL + "/bb", srv.URL + "/missing"}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"step 0 (attempt 1): submitted 3 fetch jobs\n",
		srv.URL + "/a: 200, 10 bytes, sha256 ",
		srv.URL + "/bb: 200, 11 bytes, sha256 ",
		srv.URL + "/missing: failed: GET " + srv.URL + "/missing: 404 Not Found\n",
		"step 0 (attempt 1): publish failed; the step will be retried\n",
		"step 0 (attempt 2): aggregate served from memo; nothing submitted\n",
		"run crawl-1 succeeded: 2 pages, 21 bytes, 1 failed\n",
		"jobs submitted: 3\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/a", "/bb", "/missing"} {
		if hits[p] != 1 {
			t.Errorf("%s fetched %d times, want 1 (hits %v)", p, hits[p], hits)
		}
	}
}
