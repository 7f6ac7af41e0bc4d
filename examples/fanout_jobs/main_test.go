package main

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
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

	got := exampletest.MustRun(t, run, "--store", exampletest.FileStore(t), "--run-id", "crawl-1",
		srv.URL+"/a", srv.URL+"/bb", srv.URL+"/missing")
	exampletest.Contains(t, got,
		"step 0 (attempt 1): submitted 3 fetch jobs\n",
		srv.URL+"/a: 200, 10 bytes, sha256 ",
		srv.URL+"/bb: 200, 11 bytes, sha256 ",
		srv.URL+"/missing: failed: GET "+srv.URL+"/missing: 404 Not Found\n",
		"step 0 (attempt 1): publish failed; the step will be retried\n",
		"step 0 (attempt 2): aggregate served from memo; nothing submitted\n",
		"run crawl-1 succeeded: 2 pages, 21 bytes, 1 failed\n",
		"jobs submitted: 3\n",
	)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []string{"/a", "/bb", "/missing"} {
		if hits[p] != 1 {
			t.Errorf("%s fetched %d times, want 1 (hits %v)", p, hits[p], hits)
		}
	}
}
