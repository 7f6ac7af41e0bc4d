package server_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// GET /v1/runs reads the page it answers through the index, not every
// run: over runs sealed into many segments, the first page and its
// counts read at most the index of the segments its runs lie in, where
// a listing that visits every run reads every segment's index (the
// cache holds two). The counts stay exact without a filter and are a
// flagged lower bound past the cap with one.
func TestListRunsReadsThePageNotEveryRun(t *testing.T) {
	const sealed, unsealed = 400, 5
	f, store := sealedRunsFixture(t, sealed)
	ctx := f.ctx
	for range unsealed {
		if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", Labels: map[string]string{"team": "blue"}}); err != nil {
			t.Fatal(err)
		}
	}
	waitSucceeded(t, f, sealed+unsealed)

	before := store.Counts()
	l, err := f.c.ListRuns(ctx, client.ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if gets := store.Counts().Sub(before).Gets; gets > 2 {
		t.Errorf("the first page of 10 over %d sealed runs in %d segments read %d objects, want at most 2 segment indexes", sealed, sealed/20, gets)
	}
	if len(l.Runs) != 10 || l.NextCursor == nil || l.Counts["succeeded"] != sealed+unsealed || l.CountsCapped {
		t.Errorf("first page: %d runs, cursor %v, counts %v capped %v; want 10, a cursor, %d succeeded, exact", len(l.Runs), l.NextCursor, l.Counts, l.CountsCapped, sealed+unsealed)
	}

	// The cursor walks every run once, in id order.
	seen, last := map[string]bool{}, ""
	for cursor := ""; ; {
		page, err := f.c.ListRuns(ctx, client.ListOptions{Limit: 37, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			if seen[r.RunID] || r.RunID <= last {
				t.Fatalf("run %s listed twice or out of order (after %s)", r.RunID, last)
			}
			seen[r.RunID], last = true, r.RunID
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if len(seen) != sealed+unsealed {
		t.Errorf("the pages listed %d runs, want %d", len(seen), sealed+unsealed)
	}

	// Filtered: the label index gives the page; the counts are exact
	// under the cap and flagged a lower bound over it.
	l, err = f.c.ListRuns(ctx, client.ListOptions{Labels: map[string]string{"team": "blue"}, Status: []string{"succeeded"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Runs) != unsealed || l.Counts["succeeded"] != unsealed || l.CountsCapped {
		t.Errorf("label team=blue: %d runs, counts %v capped %v; want %d, exact", len(l.Runs), l.Counts, l.CountsCapped, unsealed)
	}
	defer server.SetCountCap(100)()
	l, err = f.c.ListRuns(ctx, client.ListOptions{Workflow: "greet", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Runs) != 3 || l.Counts["succeeded"] != 100 || !l.CountsCapped {
		t.Errorf("workflow greet over the count cap of 100: %d runs, counts %v capped %v; want 3, 100 succeeded, capped", len(l.Runs), l.Counts, l.CountsCapped)
	}
	if l, err = f.c.ListRuns(ctx, client.ListOptions{Workflow: "other"}); err != nil || len(l.Runs) != 0 || l.Counts["succeeded"] != 0 || l.CountsCapped {
		t.Errorf("workflow other: %+v %v, want no run", l, err)
	}
}

// sealedRunsFixture is a fixture over a counting store holding n ended
// greet.yaml runs sealed into segments of 20, with a cache of two
// segment indexes: a read of every run reads every segment's index.
func sealedRunsFixture(t *testing.T, n int) (*fixture, *counting.Store) {
	t.Helper()
	store := counting.New(mem.New())
	f := newFixtureOn(t, store, runtime.Options{Sealing: &runtime.SealOptions{BatchRuns: 20, CacheSegments: 2, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	for range n {
		if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "greet.yaml"}); err != nil {
			t.Fatal(err)
		}
	}
	waitSucceeded(t, f, n)
	// A run becomes sealable once the server's terminal hook handled its
	// end, which may come after its status says succeeded: sweep until
	// every run is sealed.
	for sealed := 0; sealed < n; {
		res, err := f.rt.Sweep(f.ctx)
		if sealed += res.Sealed; err != nil || sealed > n {
			t.Fatalf("Sweep: %+v %v, %d runs sealed in all; want %d", res, err, sealed, n)
		}
		if sealed == n {
			break
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("%d of %d runs sealed within the test's deadline", sealed, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return f, store
}

// waitSucceeded waits until want runs have succeeded.
func waitSucceeded(t *testing.T, f *fixture, want int) {
	t.Helper()
	for {
		c, err := f.rt.Inspector().CountRuns(f.ctx, runstate.ListOptions{})
		if err == nil && c[runstate.StateSucceeded] == want {
			return
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("%d runs succeeded within %v (counts %v, err %v), want %d", c[runstate.StateSucceeded], deadline, c, err, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// GET /v1/runs?order=desc lists newest first: over 60 runs (35 sealed,
// 25 in the KV) in pages of 25, the first page holds the 25 submitted
// last, newest first, and the pages neither overlap nor skip (together
// the ascending listing reversed). A filtered descending listing keeps
// the order and the filter.
func TestListRunsNewestFirst(t *testing.T) {
	const sealed, recent, page = 35, 25, 25
	f, _ := sealedRunsFixture(t, sealed)
	ctx := f.ctx
	var submitted []string
	for i := range recent {
		labels := map[string]string{"parity": fmt.Sprint(i % 2)}
		sub, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		submitted = append(submitted, sub.RunID)
	}
	waitSucceeded(t, f, sealed+recent)

	walk := func(o client.ListOptions) []string {
		t.Helper()
		var out []string
		seen := map[string]bool{}
		for {
			l, err := f.c.ListRuns(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range l.Runs {
				if seen[r.RunID] {
					t.Fatalf("run %s listed on two pages (%+v)", r.RunID, o)
				}
				seen[r.RunID] = true
				out = append(out, r.RunID)
			}
			if l.NextCursor == nil {
				return out
			}
			o.Cursor = *l.NextCursor
		}
	}
	asc := walk(client.ListOptions{Limit: page})
	first, err := f.c.ListRuns(ctx, client.ListOptions{Limit: page, Descending: true})
	if err != nil {
		t.Fatal(err)
	}
	newest := slices.Clone(submitted)
	slices.Reverse(newest)
	var got []string
	for _, r := range first.Runs {
		got = append(got, r.RunID)
	}
	if !slices.Equal(got, newest) {
		t.Errorf("the first page newest first is\n %v\nwant the %d runs submitted last, newest first:\n %v", got, recent, newest)
	}
	desc := walk(client.ListOptions{Limit: page, Descending: true})
	want := slices.Clone(asc)
	slices.Reverse(want)
	if len(asc) != sealed+recent || !slices.Equal(desc, want) {
		t.Errorf("newest first in pages of %d listed %d runs, want the %d of the ascending listing reversed:\n got %v\nwant %v", page, len(desc), len(asc), desc, want)
	}
	odd := walk(client.ListOptions{Limit: 4, Descending: true, Labels: map[string]string{"parity": "1"}, Status: []string{"succeeded"}})
	var wantOdd []string
	for i := len(submitted) - 1; i >= 0; i-- {
		if i%2 == 1 {
			wantOdd = append(wantOdd, submitted[i])
		}
	}
	if !slices.Equal(odd, wantOdd) {
		t.Errorf("label parity=1 newest first: %v, want %v", odd, wantOdd)
	}

	res, err := http.Get(f.hs.URL + "/v1/runs?order=newest")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"field":"order"`) {
		t.Errorf("order=newest: %d %s, want 400 naming the field order", res.StatusCode, b)
	}
}
