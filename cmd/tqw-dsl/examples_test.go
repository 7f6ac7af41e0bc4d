package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// workflows/fanout.tqw.yaml puts each item's index, a number, into a
// header, which takes a string: it arrives as text, as the same value
// inside a longer template would (issue 12). Through the built binary.
func TestRunFanoutExample(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var items []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		items = append(items, r.Header.Get("X-Item"))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	c := newCLI(t)
	input := fmt.Sprintf(`{"urls": [%q, %q]}`, srv.URL+"/a", srv.URL+"/b")
	out, _ := c.must(0, "run", abs(t, "../../workflows/fanout.tqw.yaml"), "--input", input)
	if strings.TrimSpace(out) != `{"fetched":2,"ok":2}` {
		t.Fatalf("result %q; want both fetched", out)
	}
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(items, ",")
	if got != "0,1" && got != "1,0" {
		t.Fatalf("X-Item headers %q; want the indexes 0 and 1 as text", got)
	}
}
