package ui_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tqw-dsl/tqw/internal/browsertest"
)

// inCluster is a JavaScript function: whether the graph draws step id
// inside the subgraph whose id ends in cluster (its box holds the node's).
const inCluster = `((step, cluster) => {
	const svg = document.querySelector('#graph svg');
	const c = [...svg.querySelectorAll('g.cluster')].find((g) => g.id === cluster || g.id.endsWith('-' + cluster));
	const n = [...svg.querySelectorAll('g.node')].find((g) => new RegExp('(^|-)s_' + step + '(-|$)').test(g.id));
	if (!c || !n) return false;
	const a = c.getBoundingClientRect(), b = n.getBoundingClientRect();
	return b.width > 0 && a.left <= b.left && a.top <= b.top && b.right <= a.right && b.bottom <= a.bottom;
})`

// TestBrowserBlocks shows a run of a workflow with a parallel step, a map,
// on_error and finally: the run page's graph draws each branch's steps in
// a subgraph of its own between the fork and the join, the map's steps in
// a subgraph titled with its concurrency, and on_error and finally as
// subgraphs.
func TestBrowserBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: builds tqw-dsl and runs Chromium; skipped with -short")
	}
	browsertest.Chromium(t)
	srv := startServe(t)
	b := openBrowser(t, srv)
	b.signIn(srv, "/")
	b.until("the runs list connects", `document.querySelector('#live.on') !== null`)

	yaml, err := os.ReadFile(filepath.Join("testdata", "blocks.tqw.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const runID = "ui-browser-blocks"
	var sub struct {
		RunID string `json:"run_id"`
	}
	srv.api(t, "POST", "/v1/runs", map[string]any{"yaml": string(yaml), "run_id": runID, "input": map[string]any{"order": "o-1"}}, &sub)
	b.step("open the run page", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("the graph is drawn", `!!document.querySelector('#graph svg g.node') && document.querySelector('#graph').getAttribute('aria-busy') === null`)
	for _, c := range []struct{ step, cluster string }{
		{"quick_check", "b_checks__quick"},
		{"slow_check", "b_checks__slow"},
		{"charge", "m_charge_all"},
		{"charged", "m_charge_all"},
		{"refused", "m_charge_all"},
		{"report", "on_error"},
		{"wrap_up", "finally"},
	} {
		b.until(fmt.Sprintf("the graph draws %s inside subgraph %s", c.step, c.cluster), fmt.Sprintf(`%s(%q, %q)`, inCluster, c.step, c.cluster))
	}
	for _, c := range []struct{ step, cluster string }{{"checks", "b_checks__quick"}, {"quick_check", "b_checks__slow"}, {"done", "m_charge_all"}} {
		if got := b.eval("check a step outside a subgraph", fmt.Sprintf(`String(%s(%q, %q))`, inCluster, c.step, c.cluster)); got != "false" {
			t.Errorf("the graph draws %s inside %s", c.step, c.cluster)
		}
	}
	titles := b.eval("read the subgraph titles", `[...document.querySelectorAll('#graph svg g.cluster')].map((g) => g.textContent.trim()).sort().join('|')`)
	for _, want := range []string{"branch quick", "branch slow", "charge_all: each item, concurrency 2", "finally: after every outcome"} {
		if !containsPart(titles, want) {
			t.Errorf("subgraph titles %q lack %q", titles, want)
		}
	}
	if joins := b.eval("count the join bars", `String([...document.querySelectorAll('#graph svg g.node')].filter((g) => /(^|-)j_(checks|charge_all)(-|$)/.test(g.id)).length)`); joins != "2" {
		t.Errorf("the graph has %s join nodes, want one for checks and one for charge_all", joins)
	}
	b.shot("blocks-graph")
	b.checkClean()
}

func containsPart(joined, want string) bool {
	for _, p := range strings.Split(joined, "|") {
		if p == want {
			return true
		}
	}
	return false
}
