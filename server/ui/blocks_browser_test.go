package ui_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// subgraphs; and, from the live run, the parallel step's branches with
// their states while one waits on its signal, then the map's progress once
// two of its items ended, and neither once the run ended.
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

	// The run's live state: the quick branch succeeded, the slow one waits
	// on its signal, so the run view lists both branches (branches) with
	// their states, and the graph marks the steps they are at.
	var branchRun string
	for deadline := time.Now().Add(time.Minute); ; {
		var run struct {
			Branches []struct {
				Branch, State string
				RunID         string `json:"run_id"`
			} `json:"branches"`
		}
		srv.api(t, "GET", "/v1/runs/"+runID, nil, &run)
		if len(run.Branches) == 2 && run.Branches[1].Branch == "slow" && run.Branches[1].State == "waiting" && run.Branches[0].State == "succeeded" {
			branchRun = run.Branches[1].RunID
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run view's branches are %v; want quick succeeded and slow waiting", run.Branches)
		}
		<-time.After(20 * time.Millisecond) // a poll's interval, not a wait for the state
	}
	b.step("open the run page in the parallel step", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("the page lists both branches with their states and runs",
		fmt.Sprintf(`(() => { const q = document.querySelector('#blocks [data-parallel=checks] [data-branch=quick][data-state=succeeded]');
		   const s = document.querySelector('#blocks [data-parallel=checks] [data-branch=slow]');
		   return !!q && !!s && s.dataset.state === 'waiting' && /slow_check/.test(s.textContent) && s.querySelector('a').getAttribute('href') === %q; })()`, "/ui/runs/"+url.QueryEscape(branchRun)))
	b.until("the graph marks the parallel step and the waiting branch's step current, and not the ended branch's",
		`(() => { const c = [...document.querySelectorAll('#graph svg g.node.current')].map((g) => g.id).join(' ');
		          return /s_checks/.test(c) && /s_slow_check/.test(c) && !/s_quick_check/.test(c); })()`)
	if got := b.text("read the legend", `[data-graph-current]`); got != "checks, slow_check" {
		t.Errorf("the legend's current steps are %q, want checks, slow_check", got)
	}
	if b.eval("check the map panel is absent", `String(document.querySelector('#blocks [data-map]') === null)`) != "true" {
		t.Error("a map's progress shows while no map step runs")
	}
	b.shot("blocks-branches")

	// The slow branch's signal moves the run into the map; of its first
	// two items (concurrency 2) one succeeds and one fails (tolerated).
	srv.api(t, "POST", "/v1/signals/slow:o-1", "late", nil)
	srv.api(t, "POST", "/v1/signals/item:o-1:0", map[string]any{"ok": true}, nil)
	srv.api(t, "POST", "/v1/signals/item:o-1:1", map[string]any{"ok": false}, nil)
	b.step("open the run page in the map step", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("the page shows the map's progress",
		`(() => { const m = document.querySelector('#blocks [data-map=charge_all]'); const p = m && m.querySelector('progress');
		          return !!p && p.value === 2 && p.max === 4 && /1 done, 1 failed, of 4 items/.test(m.textContent); })()`)
	if b.eval("check the branches are gone", `String(document.querySelector('#blocks [data-parallel]') === null)`) != "true" {
		t.Error("the branches still show in the map step")
	}
	b.shot("blocks-map")

	// The last items end the map and the run: the section is hidden.
	srv.api(t, "POST", "/v1/signals/item:o-1:2", map[string]any{"ok": true}, nil)
	srv.api(t, "POST", "/v1/signals/item:o-1:3", map[string]any{"ok": true}, nil)
	b.step("open the run page once the run ended", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("once the run ended the section is hidden", `document.querySelector('#run-header [data-field=state] [data-state], #run-header [data-field=state]') !== null &&
		/succeeded/.test(document.querySelector('#run-header [data-field=state]').textContent) && document.querySelector('#blocks').hidden`)
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
