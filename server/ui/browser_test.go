package ui_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tqw-dsl/tqw/internal/browsertest"
	"github.com/tqw-dsl/tqw/internal/tqwdslbin"
)

// servedProcess is a real `tqw-dsl serve` started by the test.
type servedProcess struct {
	base  string // http://127.0.0.1:PORT
	token string
	cmd   *exec.Cmd
	log   *bytes.Buffer
}

// startServe builds tqw-dsl and starts `serve` on a free loopback port with
// a file store and the repository's workflows folder; cleanup stops it by
// its PID (SIGTERM, then SIGKILL after 30 s).
func startServe(t *testing.T) *servedProcess {
	t.Helper()
	dir := t.TempDir()
	bin, err := tqwdslbin.Path(dir)
	if err != nil {
		t.Fatal(err)
	}
	workflows, err := filepath.Abs(filepath.Join("..", "..", "workflows"))
	if err != nil {
		t.Fatal(err)
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	p := &servedProcess{token: hex.EncodeToString(tok), log: &bytes.Buffer{}}
	p.cmd = exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--store", "file://"+filepath.Join(dir, "store"), "--workflows", workflows, "--allow-inline")
	p.cmd.Env = append(os.Environ(), "TQW_API_TOKEN="+p.token)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting tqw-dsl serve: %v", err)
	}
	var logMu sync.Mutex
	addr := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		served := regexp.MustCompile(`serving (http://127\.0\.0\.1:[0-9]+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := served.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { <-copied; exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
			t.Errorf("tqw-dsl serve (pid %d) did not stop within 30s of SIGTERM; killed", p.cmd.Process.Pid)
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("tqw-dsl serve log:\n%s", p.log)
			logMu.Unlock()
		}
	})
	select {
	case p.base = <-addr:
	case err := <-exited:
		t.Fatalf("tqw-dsl serve exited before serving: %v\n%s", err, p.log)
	case <-time.After(60 * time.Second):
		t.Fatalf("tqw-dsl serve printed no address within 60s:\n%s", p.log)
	}
	t.Logf("tqw-dsl serve pid %d at %s", p.cmd.Process.Pid, p.base)
	return p
}

// api calls the server's API with the token and decodes the JSON answer.
func (p *servedProcess) api(t *testing.T, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// screenshotDir is where the test keeps its screenshots: TQW_UI_SCREENSHOTS,
// else a new folder under the system temp dir that outlives the test, so
// the pictures can be looked at (the test prints their paths).
func screenshotDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TQW_UI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "tqw-ui-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// browser is a headless Chromium tab on a served UI, recording what the
// pages did that they must not: requests to other origins and scripts
// that threw.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	n     int

	mu        sync.Mutex
	elsewhere []string
	thrown    []string
	console   []string
	// paused receives the requests the fetch domain holds.
	paused chan fetch.RequestID
}

// openBrowser starts a tab for srv. On a failure the test prints what the
// page said.
func openBrowser(t *testing.T, srv *servedProcess) *browser {
	t.Helper()
	b := &browser{t: t, shots: screenshotDir(t), paused: make(chan fetch.RequestID, 4)}
	b.ctx = browsertest.Tab(t, context.Background(), chromedp.WindowSize(1280, 1000))
	base, _ := url.Parse(srv.base)
	listenErr := chromedp.Listen(b.ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			b.paused <- e.RequestID
		case *network.EventRequestWillBeSent:
			u, err := url.Parse(e.Request.URL)
			if err != nil || (u.Scheme != "data" && u.Host != base.Host) {
				b.elsewhere = append(b.elsewhere, e.Request.URL)
			}
		case *cdpruntime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			b.thrown = append(b.thrown, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *cdpruntime.EventConsoleAPICalled:
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.console = append(b.console, string(e.Type)+": "+strings.Join(args, " "))
		case *cdplog.EventEntryAdded:
			b.console = append(b.console, string(e.Entry.Level)+": "+e.Entry.Text)
		}
	})
	if listenErr != nil {
		t.Fatalf("starting Chromium: %v", listenErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Logf("page exceptions: %v\npage console:\n%s", b.thrown, strings.Join(b.console, "\n"))
		}
	})
	if _, err := chromedp.Call(b.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("enabling the network domain: %v", err)
	}
	if _, err := chromedp.Call(b.ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enabling the log domain: %v", err)
	}
	return b
}

// shot saves a screenshot of the page under name.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.n++
	p := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.n, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

// step runs actions with one generous deadline and fails naming what
// did not happen, with a screenshot of the page as it was.
func (b *browser) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	sctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		b.shot("failed")
		b.t.Fatalf("%s: %v", what, err)
	}
}

// until polls a JavaScript expression until it is true.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	sctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second))); err != nil {
		b.shot("failed")
		b.t.Fatalf("%s: %v (waited for %s)", what, err, expr)
	}
}

// eval evaluates a JavaScript expression.
func (b *browser) eval(what, expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// text is the rendered text of the first element sel matches, once it
// has some. One evaluation finds and reads it: the live page replaces
// nodes as events arrive, so a node looked up first may be gone by the
// time its text is read ("No node with given id found").
func (b *browser) text(what, sel string) string {
	b.t.Helper()
	sctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e === null ? "" : e.innerText; })()`, sel)
	v, err := chromedp.Run(sctx, chromedp.Poll[string](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil {
		b.shot("failed")
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// signIn opens the UI at path and gives the token dialog the token.
func (b *browser) signIn(srv *servedProcess, path string) {
	b.t.Helper()
	b.step("open the UI and meet the token dialog",
		chromedp.Navigate(srv.base+path),
		chromedp.WaitVisible(chromedp.CSS(`#token-input`)))
	b.step("enter the token",
		chromedp.SendKeys(chromedp.CSS(`#token-input`), srv.token),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#token-dialog`)))
}

// checkClean fails the test when a page requested another origin or a
// script threw.
func (b *browser) checkClean() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.elsewhere) > 0 {
		b.t.Errorf("the pages requested other origins: %v", b.elsewhere)
	}
	if len(b.thrown) > 0 {
		b.t.Errorf("scripts threw: %s", strings.Join(b.thrown, "\n"))
	}
	if errors.Is(b.ctx.Err(), context.Canceled) {
		b.t.Errorf("the browser went away: %v", b.ctx.Err())
	}
}

// TestBrowserApprovalFlow drives headless Chromium through the UI of a real
// `tqw-dsl serve`: the token dialog, a run submitted through the API
// appearing and reaching its wait in the live runs list without a reload,
// the run page's graph highlighting the waiting step, the approval form
// sending the signal, the run succeeding with the graph marking the steps
// it visited, and the workflows pages. It asserts every request the pages
// made went to the server itself and no script threw.
func TestBrowserApprovalFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: builds tqw-dsl and runs Chromium; skipped with -short")
	}
	browsertest.Chromium(t) // skip before starting a server when there is no browser
	srv := startServe(t)
	b := openBrowser(t, srv)
	ctx, shot, step, until, eval, text, paused := b.ctx, b.shot, b.step, b.until, b.eval, b.text, b.paused

	// The runs list asks for the token once, then streams.
	step("open the runs list and meet the token dialog",
		chromedp.Navigate(srv.base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token-input`)))
	shot("token-dialog")
	step("enter the token",
		chromedp.SendKeys(chromedp.CSS(`#token-input`), srv.token),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#token-dialog`)))
	until("the runs list connects to /v1/events", `document.querySelector('#live.on') !== null && document.querySelector('[data-count=all]') !== null`)
	if stored := eval("read session storage", `sessionStorage.getItem('tqw.apiToken') || ''`); stored != srv.token {
		t.Fatalf("sessionStorage holds %q, want the token", stored)
	}
	// A marker on window survives only as long as the page is not reloaded.
	eval("mark the page", `window.tqwNoReload = 'still here'`)
	shot("runs-empty")

	const runID = "ui-browser-approval"
	var sub struct {
		RunID string `json:"run_id"`
		New   bool   `json:"new"`
	}
	srv.api(t, "POST", "/v1/runs", map[string]any{"workflow": "approval.tqw.yaml", "input": map[string]any{"request": "r-42"}, "run_id": runID}, &sub)
	if sub.RunID != runID || !sub.New {
		t.Fatalf("submit: %+v, want a new run %s", sub, runID)
	}
	until("the submitted run appears in the list and reaches its wait", fmt.Sprintf(`document.querySelector('tr[data-run=%q][data-state=waiting]') !== null`, runID))
	until("the count of waiting runs says 1", `(document.querySelector('[data-count=waiting] .n') || {}).textContent === '1'`)
	if marker := eval("read the marker", `window.tqwNoReload || ''`); marker != "still here" {
		t.Fatalf("the runs list reloaded (the window marker is %q)", marker)
	}
	shot("runs-waiting")

	// The Mermaid bundle is held on its way: until it comes the graph
	// says it is loading.
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/ui/assets/vendor/mermaid.min.js"}}}); err != nil {
		t.Fatalf("enabling the fetch domain: %v", err)
	}
	step("open the run page", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-run=%q] a`, runID))))
	var held fetch.RequestID
	select {
	case held = <-paused:
	case <-time.After(60 * time.Second):
		t.Fatal("the run page did not request the Mermaid bundle within a minute")
	}
	until("the graph says it is loading while the renderer is on its way",
		`(() => { const g = document.querySelector('#graph'); const m = g && g.querySelector('[data-graph-loading]');
		          return g.getAttribute('aria-busy') === 'true' && !!m && m.checkVisibility() && /loading/i.test(m.textContent) && !g.querySelector('svg'); })()`)
	shot("run-graph-loading")
	if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: held}); err != nil {
		t.Fatalf("releasing the Mermaid bundle: %v", err)
	}
	if _, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{}); err != nil {
		t.Fatalf("disabling the fetch domain: %v", err)
	}
	until("the graph is drawn and no longer says it is loading",
		`!!document.querySelector('#graph svg') && !document.querySelector('#graph [data-graph-loading]') && document.querySelector('#graph').getAttribute('aria-busy') === null`)
	until("the approval form is generated from the wait's schema",
		`document.querySelector('#approval-form input[name=approved][type=checkbox][role=switch]') !== null && document.querySelector('#approval-form input[name=by][type=text]') !== null`)
	until("the graph highlights the waiting step, and only it",
		`(() => { const c = [...document.querySelectorAll('#graph svg g.node.current')]; return c.length === 1 && /s_ask/.test(c[0].id); })()`)
	header := text("read the header", `#run-header`)
	for _, want := range []string{"approval", "waiting", "ask", "r-42"} {
		if !strings.Contains(header, want) {
			t.Errorf("run header lacks %q:\n%s", want, header)
		}
	}
	shot("run-waiting")
	// The waiting run's duration advances without an event or a reload.
	first := text("read the waiting run's duration", `#run-header [data-field=duration]`)
	until("the waiting run's duration advances",
		fmt.Sprintf(`(() => { const d = document.querySelector('#run-header [data-field=duration]'); return !!d && d.innerText !== '' && d.innerText !== %q; })()`, first))

	step("approve in the form",
		chromedp.Click(chromedp.CSS(`#approval-form input[name=approved]`)),
		chromedp.SendKeys(chromedp.CSS(`#approval-form input[name=by]`), "browser test"))
	shot("run-approval-filled")
	step("send the signal", chromedp.Click(chromedp.CSS(`#approval-form button[type=submit]`)))
	until("the run succeeds", `document.querySelector('#run-header [data-field=state] [data-state=succeeded]') !== null`)
	until("the graph marks the visited steps and no current one",
		`(() => { const v = [...document.querySelectorAll('#graph svg g.node.visited')].map(e => e.id).join(' ');
		          return /s_ask/.test(v) && /s_approved/.test(v) && !/s_rejected/.test(v) && document.querySelector('#graph svg g.node.current') === null; })()`)
	until("the timeline shows the approved step", `document.querySelector('#timeline li[data-step=approved]') !== null`)
	result := text("read the result", `[data-field=result]`)
	if !strings.Contains(result, `"approved_by": "browser test"`) || !strings.Contains(result, `"request": "r-42"`) {
		t.Errorf("result shows %s, want approved_by \"browser test\" for request r-42", result)
	}
	var run struct {
		State  string          `json:"state"`
		Result json.RawMessage `json:"result"`
	}
	srv.api(t, "GET", "/v1/runs/"+runID, nil, &run)
	if run.State != "succeeded" {
		t.Errorf("the API says the run is %s, want succeeded", run.State)
	}
	// The store no longer keeps a finished run's input: the API leaves it
	// out and the page says so, never "null".
	var raw map[string]json.RawMessage
	srv.api(t, "GET", "/v1/runs/"+runID, nil, &raw)
	if in, ok := raw["input"]; ok {
		t.Errorf("the finished run's detail has input %s, want the field absent", in)
	}
	if got := text("read the finished run's input", `#run-header [data-field=input]`); !strings.Contains(got, "No longer kept") || strings.Contains(got, "null") {
		t.Errorf("the finished run's input shows %q, want it said no longer kept", got)
	}
	shot("run-succeeded")

	scheme := func(v string) {
		t.Helper()
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: v}}}); err != nil {
			t.Fatalf("emulating prefers-color-scheme %s: %v", v, err)
		}
	}
	scheme("dark")
	if bg := eval("read the dark background", `getComputedStyle(document.body).backgroundColor`); bg == "rgb(255, 255, 255)" {
		t.Errorf("with prefers-color-scheme dark the page background is %s", bg)
	}
	shot("run-succeeded-dark")
	scheme("light")

	step("back to the runs list", chromedp.Click(chromedp.CSS(`nav a[data-nav=runs]`)))
	until("the list shows the run succeeded", fmt.Sprintf(`document.querySelector('tr[data-run=%q][data-state=succeeded]') !== null`, runID))
	shot("runs-succeeded")

	step("open the workflows page", chromedp.Click(chromedp.CSS(`nav a[data-nav=workflows]`)))
	until("the workflows page lists approval.tqw.yaml", `document.querySelector('#workflows li[data-workflow="approval.tqw.yaml"]') !== null`)
	shot("workflows")
	step("open the approval workflow", chromedp.Click(chromedp.CSS(`#workflows li[data-workflow="approval.tqw.yaml"] a`)))
	until("the workflow page draws its graph and lists the run",
		fmt.Sprintf(`document.querySelector('#graph svg g.node') !== null && document.querySelector('#recent-body tr[data-run=%q]') !== null`, runID))
	shot("workflow")

	// The form draws each kind of field, refuses bad values inline in the
	// browser, and shows the server's schema refusal next to its field.
	yaml, err := os.ReadFile(filepath.Join("testdata", "review.tqw.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const reviewID = "ui-browser-review"
	srv.api(t, "POST", "/v1/runs", map[string]any{"yaml": string(yaml), "run_id": reviewID}, &sub)
	step("open the review run's page", chromedp.Navigate(srv.base+"/ui/runs/"+reviewID))
	until("the form has a select, a number, a text field and a switch",
		`!!document.querySelector('#approval-form select[name=decision]') && !!document.querySelector('#approval-form input[name=score][type=number][min="1"][max="5"]') &&
		 !!document.querySelector('#approval-form input[name=note][type=text][minlength="3"]') && !!document.querySelector('#approval-form input[name=urgent][role=switch]')`)
	// The fields come in the order the workflow declares them, not sorted.
	if order := eval("read the form's field order", `[...document.querySelectorAll('#approval-form [name]')].map((e) => e.name).join(',')`); order != "decision,score,note,urgent" {
		t.Errorf("the review form's fields are in the order %q, want the declared decision,score,note,urgent", order)
	}
	until("the graph of the inline workflow highlights its waiting step",
		`(() => { const c = [...document.querySelectorAll('#graph svg g.node.current')]; return c.length === 1 && /s_review/.test(c[0].id); })()`)
	// Its switch's label holds quotes and a script tag: shown as text.
	label := `output.note == "<script>alert(1)</script>" && output.urgent`
	until("the graph shows the switch's label with its quotes and tag as text",
		fmt.Sprintf(`(() => { const g = document.querySelector('#graph svg'); const t = g.textContent.replace(/\s+/g, '');
		          return t.includes(%q) && !/&quot;|&lt;|&gt;|&amp;|#quot;/.test(t) && !g.querySelector('script, img, iframe'); })()`, strings.Join(strings.Fields(label), "")))
	step("send the empty form", chromedp.Click(chromedp.CSS(`#approval-form button[type=submit]`)))
	until("each required field says what is wrong, inline",
		`['decision', 'score', 'note'].every((n) => { const i = document.querySelector('#approval-form [name=' + n + ']');
		   return i.getAttribute('aria-invalid') === 'true' && document.getElementById(i.getAttribute('aria-describedby').split(' ').pop()).textContent !== ''; })`)
	shot("review-invalid")
	var waitingRun struct {
		State string `json:"state"`
	}
	srv.api(t, "GET", "/v1/runs/"+reviewID, nil, &waitingRun)
	if waitingRun.State != "waiting" {
		t.Fatalf("after an invalid form the run is %s, want still waiting", waitingRun.State)
	}
	// A field's error goes as it is fixed, before the form is sent again;
	// the others stay.
	const fieldErr = `((n) => { const i = document.querySelector('#approval-form [name=' + n + ']');
	                   return i.getAttribute('aria-invalid') === 'true' || document.getElementById(i.getAttribute('aria-describedby').split(' ').pop()).textContent !== ''; })`
	step("fix the note", chromedp.SendKeys(chromedp.CSS(`#approval-form input[name=note]`), "ship it"))
	until("the note's error is gone, the score's stays", fieldErr+`('note') === false && `+fieldErr+`('score') === true`)
	step("fill the form with a score only the server refuses (not a multiple of 2)",
		chromedp.SetValue(chromedp.CSS(`#approval-form select[name=decision]`), "0"),
		chromedp.SendKeys(chromedp.CSS(`#approval-form input[name=score]`), "3"),
		chromedp.Click(chromedp.CSS(`#approval-form button[type=submit]`)))
	until("the server's refusal is shown at the score field",
		`(() => { const i = document.querySelector('#approval-form [name=score]'); const e = document.getElementById(i.getAttribute('aria-describedby').split(' ').pop());
		          return i.getAttribute('aria-invalid') === 'true' && /multipleOf/.test(e.textContent) && document.querySelector('#approval-form [name=note]').getAttribute('aria-invalid') !== 'true'; })()`)
	shot("review-refused")
	eval("empty the score", `(() => { document.querySelector('#approval-form input[name=score]').value = ''; return ''; })()`)
	step("type the corrected score", chromedp.SendKeys(chromedp.CSS(`#approval-form input[name=score]`), "4"))
	until("the server's refusal at the score is gone once it is changed", fieldErr+`('score') === false`)
	step("send", chromedp.Click(chromedp.CSS(`#approval-form button[type=submit]`)))
	until("the review run succeeds", `document.querySelector('#run-header [data-field=state] [data-state=succeeded]') !== null`)
	if got := text("read the review result", `[data-field=result]`); !strings.Contains(got, `"decision": "ship"`) || !strings.Contains(got, `"score": 4`) {
		t.Errorf("review result shows %s, want decision ship, score 4", got)
	}
	shot("review-succeeded")

	// The runs list filters by label, live: a labelled run submitted while
	// the filter is set appears without a reload, others do not.
	step("back to the runs list to filter by label", chromedp.Click(chromedp.CSS(`nav a[data-nav=runs]`)))
	until("the list shows the earlier runs", fmt.Sprintf(`document.querySelector('tr[data-run=%q]') !== null`, runID))
	step("filter by the label team=blue",
		chromedp.SendKeys(chromedp.CSS(`#f-label`), "team=blue\n"),
		chromedp.Blur(chromedp.CSS(`#f-label`)))
	until("the unlabelled runs leave the list", fmt.Sprintf(`document.querySelector('tr[data-run=%q]') === null && /label=team%%3Dblue/.test(location.search)`, runID))
	eval("mark the filtered page", `window.tqwNoReload = 'filtered'`)
	const blueID, redID = "ui-browser-blue", "ui-browser-red"
	// The red run reaches its wait first, so its events precede the blue
	// run's on the stream: once the blue row shows, the red one had its chance.
	srv.api(t, "POST", "/v1/runs", map[string]any{"workflow": "approval.tqw.yaml", "input": map[string]any{"request": "r-44"}, "run_id": redID, "labels": map[string]string{"team": "red"}}, &sub)
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelWait()
	for {
		var redRun struct {
			State string `json:"state"`
		}
		srv.api(t, "GET", "/v1/runs/"+redID, nil, &redRun)
		if redRun.State == "waiting" {
			break
		}
		select {
		case <-waitCtx.Done():
			t.Fatalf("the red run did not reach its wait within a minute (state %q)", redRun.State)
		case <-time.After(20 * time.Millisecond):
		}
	}
	srv.api(t, "POST", "/v1/runs", map[string]any{"workflow": "approval.tqw.yaml", "input": map[string]any{"request": "r-45"}, "run_id": blueID, "labels": map[string]string{"team": "blue"}}, &sub)
	until("the blue run appears, waiting", fmt.Sprintf(`document.querySelector('tr[data-run=%q][data-state=waiting]') !== null`, blueID))
	if rows := eval("read the filtered rows", `[...document.querySelectorAll('#runs-body tr')].map((r) => r.dataset.run).join(',')`); rows != blueID {
		t.Errorf("with the label filter team=blue the list shows %q, want only %s", rows, blueID)
	}
	if marker := eval("read the marker", `window.tqwNoReload || ''`); marker != "filtered" {
		t.Errorf("the filtered list reloaded (the window marker is %q)", marker)
	}
	shot("runs-by-label")
	// Each row shows its labels (the workflow label only in its own
	// column); clicking one filters the list by it.
	chips := func(id string) string {
		return eval("read the labels of "+id, fmt.Sprintf(`[...document.querySelectorAll('tr[data-run=%q] .labels button.label')].map((b) => b.textContent + ':' + b.getAttribute('aria-pressed')).join(',')`, id))
	}
	if got := chips(blueID); got != "team=blue:true" {
		t.Errorf("the blue run's labels cell shows %q, want team=blue, pressed (the filter)", got)
	}
	step("open the unfiltered runs list", chromedp.Navigate(srv.base+"/ui/"))
	until("the list shows the labelled and the unlabelled runs", fmt.Sprintf(`document.querySelector('tr[data-run=%q]') !== null && document.querySelector('tr[data-run=%q]') !== null && document.querySelector('tr[data-run=%q]') !== null`, redID, blueID, runID))
	if got := chips(redID); got != "team=red:false" {
		t.Errorf("the red run's labels cell shows %q, want team=red", got)
	}
	if got := chips(runID); got != "" {
		t.Errorf("the unlabelled run's labels cell shows %q, want nothing (its workflow label is the Workflow column)", got)
	}
	step("click the red run's label", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-run=%q] .labels button.label`, redID))))
	until("the list shows only the red run, filtered by its label", fmt.Sprintf(`%s === %q && /label=team%%3Dred/.test(location.search) && document.querySelector('#f-label').value === 'team=red'`,
		`[...document.querySelectorAll('#runs-body tr')].map((r) => r.dataset.run).join(',')`, redID))
	shot("runs-by-clicked-label")
	for _, id := range []string{blueID, redID} {
		srv.api(t, "POST", "/v1/runs/"+id+"/cancel", nil, nil)
	}

	// Cancel asks first, then cancels.
	const cancelID = "ui-browser-cancel"
	srv.api(t, "POST", "/v1/runs", map[string]any{"workflow": "approval.tqw.yaml", "input": map[string]any{"request": "r-43"}, "run_id": cancelID}, &sub)
	step("open the run to cancel", chromedp.Navigate(srv.base+"/ui/runs/"+cancelID))
	until("the run waits", `document.querySelector('#run-header [data-field=state] [data-state=waiting]') !== null`)
	// The confirmation is hidden until asked for: one click on it cannot cancel.
	const confirmShown = `(() => { const c = document.querySelector('#cancel-confirm'), y = document.querySelector('#cancel-yes');
	                        return !!c && (c.checkVisibility() || y.checkVisibility()); })()`
	until("the cancel button is there", `!!document.querySelector('#cancel') && document.querySelector('#cancel').checkVisibility()`)
	if shown := eval("read whether the confirmation shows before asking", `String(`+confirmShown+`)`); shown != "false" {
		t.Fatalf("the cancel confirmation (\"Yes, cancel it\") shows before Cancel run is clicked")
	}
	step("ask to cancel, then keep it running",
		chromedp.Click(chromedp.CSS(`#cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`#cancel-yes`)),
		chromedp.Click(chromedp.CSS(`#cancel-no`)),
		chromedp.WaitVisible(chromedp.CSS(`#cancel`)))
	srv.api(t, "GET", "/v1/runs/"+cancelID, nil, &waitingRun)
	if waitingRun.State != "waiting" {
		t.Fatalf("after keeping it running the run is %s, want waiting", waitingRun.State)
	}
	if shown := eval("read whether the confirmation shows after keeping it", `String(`+confirmShown+`)`); shown != "false" {
		t.Fatalf("the cancel confirmation still shows after Keep it running")
	}
	step("ask to cancel", chromedp.Click(chromedp.CSS(`#cancel`)), chromedp.WaitVisible(chromedp.CSS(`#cancel-yes`)))
	shot("cancel-confirm")
	step("confirm", chromedp.Click(chromedp.CSS(`#cancel-yes`)))
	until("the run is cancelled and the form gone",
		`document.querySelector('#run-header [data-field=state] [data-state=cancelled]') !== null && document.querySelector('#approval-form') === null && document.querySelector('#cancel') === null`)
	shot("cancelled")

	// Newest first over two pages of the list: 60 runs of hello.yaml with
	// the ids the server gives (ULIDs, in submission order), through the
	// API in pages of 25 and in the browser's pages of 50.
	const hellos = 60
	var helloIDs []string
	for i := range hellos {
		srv.api(t, "POST", "/v1/runs", map[string]any{"workflow": "hello.yaml", "input": map[string]any{"name": fmt.Sprint("n", i)}}, &sub)
		helloIDs = append(helloIDs, sub.RunID)
	}
	helloCtx, cancelHello := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelHello()
	newest := slices.Clone(helloIDs)
	slices.Reverse(newest)
	for {
		var l struct {
			Runs []struct {
				RunID string `json:"run_id"`
			} `json:"runs"`
		}
		srv.api(t, "GET", "/v1/runs?workflow=hello&status=succeeded&limit=100", nil, &l)
		if len(l.Runs) == hellos {
			break
		}
		select {
		case <-helloCtx.Done():
			t.Fatalf("%d of the %d hello runs succeeded within two minutes", len(l.Runs), hellos)
		case <-time.After(20 * time.Millisecond):
		}
	}
	var apiOrder []string
	for cursor := ""; ; {
		var l struct {
			Runs []struct {
				RunID string `json:"run_id"`
			} `json:"runs"`
			NextCursor *string `json:"next_cursor"`
		}
		srv.api(t, "GET", "/v1/runs?workflow=hello&order=desc&limit=25&cursor="+url.QueryEscape(cursor), nil, &l)
		for _, r := range l.Runs {
			apiOrder = append(apiOrder, r.RunID)
		}
		if l.NextCursor == nil {
			break
		}
		cursor = *l.NextCursor
	}
	if !slices.Equal(apiOrder, newest) {
		t.Errorf("GET /v1/runs?order=desc in pages of 25 lists\n %v\nwant newest first\n %v", apiOrder, newest)
	}
	rowIDs := `[...document.querySelectorAll('#runs-body tr')].map((r) => r.dataset.run).join(',')`
	step("open the runs of hello", chromedp.Navigate(srv.base+"/ui/?workflow=hello"))
	until("the first page of the list shows the 50 newest", fmt.Sprintf(`document.querySelectorAll('#runs-body tr').length === 50 && document.querySelector('#runs-more').checkVisibility() && %s === %q`, rowIDs, strings.Join(newest[:50], ",")))
	shot("runs-newest-first")
	step("load more", chromedp.Click(chromedp.CSS(`#runs-more`)))
	until("the second page follows, the oldest last, none twice", fmt.Sprintf(`%s === %q && !document.querySelector('#runs-more').checkVisibility()`, rowIDs, strings.Join(newest, ",")))

	b.checkClean()
}
