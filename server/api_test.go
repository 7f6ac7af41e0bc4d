package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/signal"

	validator "github.com/pb33f/libopenapi-validator"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// TestOpenAPIDocumentIsValid validates openapi.json against the OpenAPI
// 3.1 specification's schema.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	c := sharedConformance(t)
	if v := c.doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi.json is version %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(c.doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %s", describeValidation(verrs))
	}
	if len(c.operations()) < 16 {
		t.Fatalf("openapi.json declares only %v", c.operations())
	}
}

// TestServedDocumentIsTheCheckedInOne: /v1/openapi.json is the file.
func TestServedDocumentIsTheCheckedInOne(t *testing.T) {
	f := newFixture(t)
	raw, err := f.c.OpenAPI(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(server.OpenAPI, &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("/v1/openapi.json differs from server/openapi.json")
	}
}

// TestApprovalLifecycle submits approval.tqw.yaml, finds it waiting with
// its schema, refuses a payload the schema rejects (nothing written),
// approves it and reads its history.
func TestApprovalLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	if err := f.c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Readyz(ctx); err != nil {
		t.Fatal(err)
	}
	sub, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", Input: json.RawMessage(`{"request":"laptop"}`), RunID: "ap1"})
	if err != nil || !sub.New || sub.RunID != "ap1" {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	again, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", Input: json.RawMessage(`{"request":"laptop"}`), RunID: "ap1"})
	if err != nil || again.New {
		t.Fatalf("the same submission again: %+v %v, want new=false", again, err)
	}
	_, err = f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", Input: json.RawMessage(`{"request":"phone"}`), RunID: "ap1"})
	if !errors.Is(err, client.ErrConflict) || fieldOf(err) != "run_id" {
		t.Fatalf("the same id with another input: %v, want 409 on run_id", err)
	}
	run := f.waitState("ap1", "waiting")
	if run.Waiting == nil || run.Waiting.Step != "ask" || run.Waiting.SignalKey != "approve:ap1" || run.Waiting.Schema == nil {
		t.Fatalf("waiting: %+v", run.Waiting)
	}
	if run.CurrentStep == nil || *run.CurrentStep != "ask" || run.Workflow != "approval" || run.DefinitionHash == "" || !strings.Contains(run.Mermaid, "flowchart") {
		t.Fatalf("run: %+v", run)
	}
	if in, _ := json.Marshal(run.Input); string(in) != `{"request":"laptop"}` {
		t.Fatalf("input %s", in)
	}
	list, err := f.c.ListRuns(ctx, client.ListOptions{Status: []string{"waiting"}})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].RunID != "ap1" || list.Counts["waiting"] != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}

	_, err = f.c.Signal(ctx, "approve:ap1", []byte(`{"approved":"yes"}`), false)
	if !errors.Is(err, client.ErrRejected) || fieldOf(err) != "/approved" || !strings.Contains(err.Error(), "boolean") {
		t.Fatalf("a payload the schema refuses: %v, want 422 naming the problem at /approved", err)
	}
	// A missing required property is pointed at; so is a part of a nested
	// value, and a payload wrong as a whole has no field.
	for payload, want := range map[string]string{`{"by":"ann"}`: "/approved", `{"approved":true,"by":7}`: "/by", `"yes"`: ""} {
		_, err = f.c.Signal(ctx, "approve:ap1", []byte(payload), false)
		if !errors.Is(err, client.ErrRejected) || fieldOf(err) != want {
			t.Fatalf("payload %s: %v, want 422 with field %q", payload, err, want)
		}
	}
	if _, err := f.c.Signal(ctx, "approve:nobody", []byte(`{}`), true); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("require_waiting with no waiter: %v, want 409", err)
	}
	signals, err := f.rt.Inspector().ListSignals(ctx, signal.ListOptions{})
	if err != nil || len(signals) != 0 {
		t.Fatalf("refused signals were buffered: %v %v", signals, err)
	}
	res, err := f.c.Signal(ctx, "approve:ap1", []byte(`{"approved":true,"by":"ana"}`), true)
	if err != nil || res.Delivered != "now" {
		t.Fatalf("signal: %+v %v", res, err)
	}
	run = f.waitState("ap1", "succeeded")
	if string(run.Result) != `{"approved_by":"ana","request":"laptop"}` || run.EndedAt == nil || run.Totals.Steps < 2 {
		t.Fatalf("result %s, run %+v", run.Result, run)
	}
	if strings.Join(run.VisitedSteps, ",") != "ask,approved" {
		t.Fatalf("visited %v", run.VisitedSteps)
	}
	hist, err := f.c.History(ctx, "ap1")
	if err != nil || len(hist) != 3 || hist[0].Status != "waiting" || hist[1].Next != "approved" || hist[2].Status != "succeeded" {
		t.Fatalf("history: %+v %v", hist, err)
	}
	if _, err := f.c.Cancel(ctx, "ap1"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("cancelling a finished run: %v, want 409", err)
	}
	if _, err := f.c.Signal(ctx, "approve:later", nil, false); err != nil {
		t.Fatalf("a signal nobody waits for is buffered: %v", err)
	}
}

func fieldOf(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}

// TestBadInputWritesNothing: every refused submission answers a 4xx
// naming the field and leaves the store without a run.
func TestBadInputWritesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	cases := []struct {
		name   string
		req    client.SubmitRequest
		status error
		field  string
	}{
		{"neither", client.SubmitRequest{}, client.ErrBadRequest, "workflow"},
		{"both", client.SubmitRequest{Workflow: "greet.yaml", YAML: "tqw: v1"}, client.ErrBadRequest, "yaml"},
		{"path", client.SubmitRequest{Workflow: "../greet.yaml"}, client.ErrBadRequest, "workflow"},
		{"missing file", client.SubmitRequest{Workflow: "nope.yaml"}, client.ErrNotFound, "workflow"},
		// A 422's field is a JSON pointer into the request body.
		{"invalid file", client.SubmitRequest{Workflow: "broken.yaml"}, client.ErrRejected, "/workflow"},
		{"invalid inline", client.SubmitRequest{YAML: "tqw: v1\nsteps: []\n"}, client.ErrRejected, "/yaml"},
		{"input type", client.SubmitRequest{Workflow: "approval.tqw.yaml", Input: json.RawMessage(`{"request":7}`)}, client.ErrRejected, "/input/request"},
		{"input missing", client.SubmitRequest{Workflow: "approval.tqw.yaml", Input: json.RawMessage(`{}`)}, client.ErrRejected, "/input/request"},
		{"input not an object", client.SubmitRequest{Workflow: "approval.tqw.yaml", Input: json.RawMessage(`[]`)}, client.ErrRejected, "/input"},
		{"run id", client.SubmitRequest{Workflow: "greet.yaml", RunID: "bad id!"}, client.ErrBadRequest, "run_id"},
	}
	for _, tc := range cases {
		_, err := f.c.Submit(ctx, tc.req)
		if !errors.Is(err, tc.status) || fieldOf(err) != tc.field {
			t.Errorf("%s: %v, want %v on field %q", tc.name, err, tc.status, tc.field)
		}
	}
	var ce *client.Error
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "broken.yaml"}); !errors.As(err, &ce) || len(ce.Diagnostics) == 0 || ce.Diagnostics[0].Line == 0 {
		t.Errorf("an invalid workflow's error carries no diagnostics: %v", err)
	}
	// A body that is not the object: unknown field, wrong type, not JSON.
	for body, field := range map[string]string{`{"workflow":"greet.yaml","inptu":{}}`: "inptu", `{"workflow":3}`: "workflow", `{`: ""} {
		resp, err := f.raw().Post(f.hs.URL+"/v1/runs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"field":"`+field+`"`) && field != "" {
			t.Errorf("body %s: %d %s, want 400 naming %q", body, resp.StatusCode, b, field)
		}
	}
	list, err := f.c.ListRuns(ctx, client.ListOptions{})
	if err != nil || len(list.Runs) != 0 {
		t.Fatalf("refused submissions left runs: %+v %v", list.Runs, err)
	}
	for _, q := range []string{"status=sleepy", "limit=0", "limit=x", "started_after=yesterday", "cursor=bad%20id"} {
		r, err := f.raw().Get(f.hs.URL + "/v1/runs?" + q)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /v1/runs?%s: %d, want 400", q, r.StatusCode)
		}
	}
	if _, err := f.c.Run(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	if _, err := f.c.Run(ctx, "bad id!"); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("bad run id: %v", err)
	}
	if _, err := f.c.History(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("history of an unknown run: %v", err)
	}
	if _, err := f.c.Cancel(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("cancel of an unknown run: %v", err)
	}
	if _, err := f.c.Signal(ctx, "k", []byte(`{not json`), false); !errors.Is(err, client.ErrBadRequest) || fieldOf(err) != "payload" {
		t.Errorf("a signal that is not JSON: %v", err)
	}
	if _, err := f.c.Signal(ctx, strings.Repeat("k", 2000), nil, false); !errors.Is(err, client.ErrBadRequest) || fieldOf(err) != "key" {
		t.Errorf("a signal key too long: %v", err)
	}
}

// TestInlineListCancel submits inline YAML and files, lists with filters
// and pages, and cancels a sleeping run.
func TestInlineListCancel(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	for _, id := range []string{"g1", "g2", "g3"} {
		if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: id, Input: json.RawMessage(`{"name":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	inline := "tqw: v1\nname: inline\nsteps:\n  - id: only\n    succeed: 42\n"
	if _, err := f.c.Submit(ctx, client.SubmitRequest{YAML: inline, RunID: "i1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "slow.yaml", RunID: "s1"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"g1", "g2", "g3", "i1"} {
		f.waitState(id, "succeeded")
	}
	if r := f.waitState("i1", "succeeded"); string(r.Result) != "42" || r.Workflow != "inline" {
		t.Fatalf("inline run: %+v", r)
	}
	f.waitState("s1", "scheduled")
	page, err := f.c.ListRuns(ctx, client.ListOptions{Workflow: "greet", Limit: 2})
	if err != nil || len(page.Runs) != 2 || page.NextCursor == nil || page.Counts["succeeded"] != 3 {
		t.Fatalf("first page: %+v %v", page, err)
	}
	next, err := f.c.ListRuns(ctx, client.ListOptions{Workflow: "greet", Limit: 2, Cursor: *page.NextCursor})
	if err != nil || len(next.Runs) != 1 || next.Runs[0].RunID != "g3" || next.NextCursor != nil {
		t.Fatalf("second page: %+v %v", next, err)
	}
	started := page.Runs[0].StartedAt
	if l, err := f.c.ListRuns(ctx, client.ListOptions{StartedBefore: started}); err != nil || len(l.Runs) != 0 {
		t.Fatalf("started_before the first run: %+v %v", l.Runs, err)
	}
	cr, err := f.c.Cancel(ctx, "s1")
	if err != nil || cr.RunID != "s1" {
		t.Fatalf("cancel: %+v %v", cr, err)
	}
	f.waitState("s1", "cancelled")
}

// TestWorkflowsValidateSchema covers the workflow endpoints.
func TestWorkflowsValidateSchema(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	wfs, err := f.c.Workflows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]client.WorkflowInfo{}
	for _, w := range wfs {
		byName[w.Name] = w
	}
	// Each file carries its workflow's declared name, as its runs do.
	if w := byName["approval.tqw.yaml"]; !w.Valid || w.Steps != 4 || w.Description == "" || w.Workflow != "approval" {
		t.Errorf("approval: %+v", w)
	}
	if w := byName["broken.yaml"]; w.Valid || w.Error == "" || w.Workflow != "" {
		t.Errorf("broken: %+v", w)
	}
	d, err := f.c.Workflow(ctx, "approval.tqw.yaml")
	if err != nil || !strings.Contains(d.Mermaid, "s_ask") || !strings.Contains(d.YAML, "wait_signal") || d.Title != "approval" {
		t.Fatalf("workflow: %+v %v", d, err)
	}
	if _, err := f.c.Workflow(ctx, "broken.yaml"); !errors.Is(err, client.ErrRejected) {
		t.Errorf("an invalid file: %v", err)
	}
	if _, err := f.c.Workflow(ctx, "nope.yaml"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := f.c.Workflow(ctx, ".hidden.yaml"); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("a hidden file: %v", err)
	}
	rep, err := f.c.Validate(ctx, "x.yaml", []byte("tqw: v1\nname: x\nsteps:\n  - id: a\n    next: b\n"))
	if err != nil || rep.Valid || len(rep.Diagnostics) == 0 || rep.Diagnostics[0].File != "x.yaml" {
		t.Fatalf("validate: %+v %v", rep, err)
	}
	rep, err = f.c.Validate(ctx, "", []byte("tqw: v1\nname: x\nsteps:\n  - id: a\n    succeed: 1\n"))
	if err != nil || !rep.Valid || rep.Hash == "" {
		t.Fatalf("validate a valid file: %+v %v", rep, err)
	}
	schema, err := f.c.Schema(ctx)
	if err != nil || !strings.Contains(string(schema), "$schema") {
		t.Fatalf("schema: %.100s %v", schema, err)
	}
}

// TestNoSecretInResponses runs a workflow that copies a secret into its
// vars and result and looks for the value in every answer about it.
func TestNoSecretInResponses(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	if _, err := f.c.RunEvents(ctx, "sec1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("events of a run not submitted yet: %v", err)
	}
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "echo "+r.URL.Query().Get("token"))
	}))
	defer echo.Close()
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "secret.yaml", RunID: "sec1", Input: json.RawMessage(`{"url":"` + echo.URL + `"}`)}); err != nil {
		t.Fatal(err)
	}
	run := f.waitState("sec1", "succeeded")
	hist, err := f.c.History(ctx, "sec1")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal([]any{run, hist})
	if strings.Contains(string(all), testSecret) {
		t.Fatalf("a response carries the secret: %s", all)
	}
	if !strings.Contains(string(run.Result), "***") {
		t.Fatalf("result %s: want the secret redacted as ***", run.Result)
	}
	ev, err := f.c.RunEvents(ctx, "sec1")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	for {
		e, err := ev.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(e.Data), testSecret) {
			t.Fatalf("an event carries the secret: %s", e.Data)
		}
	}
}

// TestPanicIsA500 mounts a UI that panics: the client gets a JSON 500.
func TestPanicIsA500(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.UI = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	})
	resp, err := http.Get(f.hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(b), `"code":"internal"`) || strings.Contains(string(b), "boom") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestReadyzReportsTheReason: a Ready func that fails makes /readyz 503.
func TestReadyzReportsTheReason(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.Ready = func(context.Context) error { return errors.New("the writer lease is suspended") }
	})
	err := f.c.Readyz(f.ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "suspended") {
		t.Fatalf("readyz: %v", err)
	}
	if err := f.c.Healthz(f.ctx); err != nil {
		t.Fatalf("healthz while not ready: %v", err)
	}
}

// TestConformanceCheckerCatchesDrift proves the response check can fail:
// a Run missing its fields, or with one the document does not declare,
// and an undeclared status are refused.
func TestConformanceCheckerCatchesDrift(t *testing.T) {
	c := sharedConformance(t)
	good := `{"run_id":"x","workflow":"w","state":"waiting","started_at":"2026-01-02T03:04:05Z","ended_at":null,"current_step":null,"step_number":1,"error":null,` +
		`"definition_hash":"h","input":null,"result":null,"totals":{"steps":0,"attempts":0,"retries":0,"llm_tokens":0,"llm_cost_usd":0,"wall_seconds":0,` +
		`"requests":{"put":0,"get":0,"list":0,"delete":0,"head":0},"requests_usd_at_s3_list_price":0},"waiting":null,"visited_steps":[]}`
	for name, tc := range map[string]struct {
		status int
		body   string
		ok     bool
	}{
		"good":            {200, good, true},
		"missing fields":  {200, `{"run_id":"x"}`, false},
		"extra field":     {200, strings.Replace(good, `"definition_hash"`, `"secret":"x","definition_hash"`, 1), false},
		"wrong state":     {200, strings.Replace(good, `"waiting","started_at"`, `"sleepy","started_at"`, 1), false},
		"undeclared 418":  {418, `{"error":{"code":"x","message":"y"}}`, false},
		"error not shape": {404, `{"message":"y"}`, false},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7700/v1/runs/x", nil)
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(tc.body)), Request: req}
		ok, errs := c.v.ValidateHttpResponse(req, resp)
		if ok != tc.ok {
			t.Errorf("%s: valid=%v, want %v: %s", name, ok, tc.ok, describeValidation(errs))
		}
	}
}

// TestWaitSchemaKeepsDeclaredOrder: the wait's schema carries x-order,
// the property names in the order the workflow writes them.
func TestWaitSchemaKeepsDeclaredOrder(t *testing.T) {
	f := newFixture(t)
	src := `tqw: v1
name: ordered
steps:
  - id: ask
    action: wait_signal
    with:
      key: "order:${ run.id }"
      timeout: 1h
      schema:
        type: object
        properties:
          zeta: {type: string}
          approved: {type: boolean}
          mid: {type: object, properties: {b: {type: string}, a: {type: string}}}
  - id: done
    succeed: ok
`
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: src, RunID: "ord1"}); err != nil {
		t.Fatal(err)
	}
	run := f.waitState("ord1", "waiting")
	if run.Waiting == nil {
		t.Fatal("a waiting run without its wait")
	}
	b, err := json.Marshal(run.Waiting.Schema)
	if err != nil {
		t.Fatal(err)
	}
	var sch struct {
		Order      []string `json:"x-order"`
		Properties struct {
			Mid struct {
				Order []string `json:"x-order"`
			} `json:"mid"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &sch); err != nil {
		t.Fatal(err)
	}
	if strings.Join(sch.Order, ",") != "zeta,approved,mid" || strings.Join(sch.Properties.Mid.Order, ",") != "b,a" {
		t.Fatalf("x-order %v and %v in %s; want the declared zeta,approved,mid and b,a", sch.Order, sch.Properties.Mid.Order, b)
	}
	// The annotation changes nothing in what the schema accepts.
	if _, err := f.c.Signal(f.ctx, "order:ord1", []byte(`{"zeta":"z","approved":true}`), true); err != nil {
		t.Fatal(err)
	}
	f.waitState("ord1", "succeeded")
}

// TestListByLabel: runs submitted with labels are listed by them, with
// the counts of the runs that carry them; bad labels are refused.
func TestListByLabel(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	for id, labels := range map[string]map[string]string{
		"lb-blue1": {"team": "blue"}, "lb-blue2": {"team": "blue", "tier": "gold"}, "lb-red": {"team": "red"}, "lb-none": nil,
	} {
		if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: id, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		f.waitState(id, "succeeded")
	}
	ids := func(l client.RunList) string {
		var out []string
		for _, r := range l.Runs {
			out = append(out, r.RunID)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"team": "blue"}, "lb-blue1,lb-blue2"},
		{map[string]string{"team": "blue", "tier": "gold"}, "lb-blue2"},
		{map[string]string{"team": "green"}, ""},
		{map[string]string{"workflow": "greet"}, "lb-blue1,lb-blue2,lb-none,lb-red"},
	} {
		l, err := f.c.ListRuns(ctx, client.ListOptions{Labels: tc.labels})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(l); got != tc.want || l.Counts["succeeded"] != len(l.Runs) {
			t.Errorf("label %v: runs %q counts %v, want %q", tc.labels, got, l.Counts, tc.want)
		}
	}
	run, err := f.c.Run(ctx, "lb-blue2")
	if err != nil || run.Labels["team"] != "blue" || run.Labels["tier"] != "gold" || run.Labels["workflow"] != "greet" {
		t.Fatalf("run labels %v %v", run.Labels, err)
	}
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", Labels: map[string]string{"workflow": "other"}}); !errors.Is(err, client.ErrBadRequest) || fieldOf(err) != "labels" {
		t.Errorf("the reserved workflow label: %v, want 400 on labels", err)
	}
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", Labels: map[string]string{"": "x"}}); !errors.Is(err, client.ErrBadRequest) || fieldOf(err) != "labels" {
		t.Errorf("an empty label key: %v, want 400 on labels", err)
	}
	for _, q := range []string{"label=nokey", "label==x", "label=a=1&label=a=2"} {
		r, err := f.raw().Get(f.hs.URL + "/v1/runs?" + q)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /v1/runs?%s: %d, want 400", q, r.StatusCode)
		}
	}
}
