package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
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

	// The run view's branches and map progress are drawn from its fields
	// branches ([{step, branch, run_id, state, current_step}], proposed)
	// and map_progress ({step, done, failed, total}). The test sets them
	// in the server's real answers, in the browser, so that the page
	// draws a known state of each whatever the run itself reached (its
	// slow branch waits; a server whose interpreter does not run parallel
	// steps fails the run at checks).
	var extraMu sync.Mutex
	extra := map[string]any{}
	setExtra := func(fields map[string]any) {
		extraMu.Lock()
		defer extraMu.Unlock()
		extra = fields
	}
	serveCtx, stopServing := context.WithCancel(b.ctx)
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			var id fetch.RequestID
			select {
			case id = <-b.paused:
			case <-serveCtx.Done():
				return
			}
			body, err := chromedp.Call(b.ctx, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: id})
			var run map[string]any
			if err == nil {
				err = json.Unmarshal(body.Body, &run)
			}
			if err != nil {
				t.Errorf("reading the run view the page asked for: %v", err)
				_, _ = chromedp.Call(b.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
				continue
			}
			extraMu.Lock()
			maps.Copy(run, extra)
			extraMu.Unlock()
			out, _ := json.Marshal(run)
			if _, err := chromedp.Call(b.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: id, ResponseCode: 200,
				ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}, {Name: "Cache-Control", Value: "no-store"}}, Body: out}); err != nil && serveCtx.Err() == nil {
				t.Errorf("answering the page's run view: %v", err)
			}
		}
	}()
	defer func() { stopServing(); <-served }()
	if _, err := chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/v1/runs/" + runID, RequestStage: fetch.RequestStageResponse}}}); err != nil {
		t.Fatalf("enabling the fetch domain: %v", err)
	}
	branchRun := runID + ":checks:1.1:slow"
	setExtra(map[string]any{"state": "running", "current_step": "checks", "branches": []map[string]any{
		{"step": "checks", "branch": "quick", "run_id": runID + ":checks:1.1:quick", "state": "succeeded"},
		{"step": "checks", "branch": "slow", "run_id": branchRun, "state": "waiting", "current_step": "slow_check"},
	}})
	b.step("open the run page in the parallel step", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("the page lists both branches with their states and runs",
		fmt.Sprintf(`(() => { const q = document.querySelector('#blocks [data-parallel=checks] [data-branch=quick] [data-state=succeeded]');
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

	setExtra(map[string]any{"state": "running", "current_step": "charge_all", "map_progress": map[string]any{"step": "charge_all", "done": 1, "failed": 1, "total": 4}})
	b.step("open the run page in the map step", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("the page shows the map's progress",
		`(() => { const m = document.querySelector('#blocks [data-map=charge_all]'); const p = m && m.querySelector('progress');
		          return !!p && p.value === 2 && p.max === 4 && /1 done, 1 failed, of 4 items/.test(m.textContent); })()`)
	if b.eval("check the branches are gone", `String(document.querySelector('#blocks [data-parallel]') === null)`) != "true" {
		t.Error("the branches still show in the map step")
	}
	b.shot("blocks-map")
	setExtra(map[string]any{})
	b.step("open the run page as the server sends it", chromedp.Navigate(srv.base+"/ui/runs/"+runID))
	b.until("without those fields the section is hidden", `document.querySelector('#run-header [data-field=state]') !== null && document.querySelector('#blocks').hidden`)
	if _, err := chromedp.Call(b.ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatalf("disabling the fetch domain: %v", err)
	}
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
