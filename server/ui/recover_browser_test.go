package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tqw-dsl/tqw/internal/browsertest"
)

// TestBrowserRetryAndSkip drives the run page of a failed run: the Retry
// button redrives it once the step's server is fixed, and Skip records the
// failed step as done with the output typed in.
func TestBrowserRetryAndSkip(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: builds tqw-dsl and runs Chromium; skipped with -short")
	}
	browsertest.Chromium(t)
	var fixed atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("fixed"))
	}))
	defer flaky.Close()
	srv := startServe(t)
	ctx := browsertest.Tab(t, context.Background(), chromedp.WindowSize(1280, 1000))
	// The first action starts the browser, bound to the context it gets:
	// the tab's, not a step's shorter one.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`"started"`)); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	const yaml = "tqw: v1\nname: flaky\nsteps:\n  - id: fetch\n    action: http\n    with: {url: \"${ input.url }\"}\n  - id: done\n    succeed: \"${ output.body }\"\n"
	failed := func(id string) {
		t.Helper()
		srv.api(t, "POST", "/v1/runs", map[string]any{"yaml": yaml, "input": map[string]any{"url": flaky.URL}, "run_id": id}, nil)
		deadline := time.Now().Add(time.Minute)
		for {
			var run struct {
				State string `json:"state"`
			}
			srv.api(t, "GET", "/v1/runs/"+id, nil, &run)
			if run.State == "failed" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s is %s a minute on; want failed", id, run.State)
			}
		}
	}
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	until := func(what, expr string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second))); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#main').innerText`))
			t.Fatalf("%s: %v (waited for %s); the page says:\n%s", what, err, expr, page)
		}
	}
	succeededWith := func(result string) string {
		return fmt.Sprintf(`document.querySelector('[data-field=state] [data-state=succeeded]') !== null && (document.querySelector('[data-field=result]') || {}).innerText === %q`, result)
	}

	failed("ui-retry")
	do("open the failed run and give the token",
		chromedp.Navigate(srv.base+"/ui/runs/ui-retry"),
		chromedp.WaitVisible(chromedp.CSS(`#token-input`)),
		chromedp.SendKeys(chromedp.CSS(`#token-input`), srv.token),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#retry`)))
	until("the Skip button names the failed step", `(document.querySelector('#skip') || {}).innerText === 'Skip step fetch'`)
	fixed.Store(true)
	do("retry", chromedp.Click(chromedp.CSS(`#retry`)))
	until("the run succeeds after the retry", succeededWith(`"fixed"`))
	until("a succeeded run offers no retry", `document.querySelector('#retry') === null`)

	fixed.Store(false)
	failed("ui-skip")
	do("open the second failed run and skip its step",
		chromedp.Navigate(srv.base+"/ui/runs/ui-skip"),
		chromedp.WaitVisible(chromedp.CSS(`#skip`)),
		chromedp.Click(chromedp.CSS(`#skip`)),
		chromedp.WaitVisible(chromedp.CSS(`#skip-output`)),
		chromedp.SetValue(chromedp.CSS(`#skip-output`), `{"body": "typed"}`),
		chromedp.Click(chromedp.CSS(`#skip-yes`)))
	until("the run succeeds with the output typed in", succeededWith(`"typed"`))
	until("the timeline shows the skip", `document.querySelector('#timeline li[data-status=skipped][data-step=fetch]') !== null`)
}
