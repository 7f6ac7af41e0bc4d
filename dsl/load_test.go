package dsl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/dsl/dslgen"
)

func TestLoadRefund(t *testing.T) {
	w, diags, err := Load("../workflows/refund.tqw.yaml")
	if err != nil || len(diags) != 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	src, _ := os.ReadFile("../workflows/refund.tqw.yaml")
	sum := sha256.Sum256(src)
	if w.Hash != hex.EncodeToString(sum[:]) || !bytes.Equal(w.Source, src) {
		t.Error("Hash or Source does not match the file")
	}
	if w.Name != "refund-approval" || w.Version != "v1" || len(w.Steps) != 8 || len(w.Secrets) != 2 {
		t.Fatalf("unexpected workflow header: %+v", w)
	}
	if w.Defaults.Timeout != 30*time.Second || w.Defaults.Retry.MaxAttempts != 3 || w.Defaults.Retry.MaxInterval != time.Minute {
		t.Errorf("defaults = %+v / %+v", w.Defaults, *w.Defaults.Retry)
	}
	kinds := map[string]Kind{"fetch": KindAction, "decide": KindSwitch, "ask": KindAction, "refund": KindAction,
		"notice": KindAction, "done": KindSucceed, "rejected": KindFail, "escalate": KindAction}
	for i, s := range w.Steps {
		if s.Kind != kinds[s.ID] || s.Index != i || w.Step(s.ID) != s {
			t.Errorf("step %s: kind %s index %d", s.ID, s.Kind, s.Index)
		}
		if j, ok := w.Index(s.ID); !ok || j != i {
			t.Errorf("Index(%s) = %d, %v", s.ID, j, ok)
		}
	}
	if w.Step("nope") != nil {
		t.Error("Step of an unknown id is not nil")
	}
	fetch := w.Step("fetch")
	if fetch.Retry.MaxAttempts != 5 || !fetch.Retry.RetriesType("http.connection") || fetch.Retry.RetriesType("http.status_4xx") {
		t.Errorf("fetch retry = %+v", *fetch.Retry)
	}
	if fetch.Timeout != 30*time.Second {
		t.Errorf("fetch timeout %v; want the default 30s", fetch.Timeout)
	}
	with, err := fetch.With.Eval(&Env{Input: map[string]any{"order_id": "o7"}, Secrets: map[string]string{"SHOP_TOKEN": "s3"}})
	if err != nil {
		t.Fatal(err)
	}
	m := with.(map[string]any)
	if m["url"] != "https://shop.example/orders/o7" || m["headers"].(map[string]any)["Authorization"] != "Bearer s3" || m["method"] != "GET" {
		t.Errorf("with = %v", m)
	}
	if len(fetch.Set) != 1 || fetch.Set[0].Name != "amount" {
		t.Errorf("set = %+v", fetch.Set)
	}
	v, err := fetch.Set[0].Value.Eval(&Env{Output: map[string]any{"body": map[string]any{"amount": 120.0}}})
	if err != nil || v != 120.0 {
		t.Errorf("set amount = %v, %v", v, err)
	}
	decide := w.Step("decide")
	if ok, err := decide.Switch[0].When.EvalBool(&Env{Vars: map[string]any{"amount": 120.0}}); err != nil || !ok {
		t.Errorf("decide when = %v, %v", ok, err)
	}
	if next, ok := decide.Next.Static(); !ok || next != "refund" {
		t.Errorf("decide next = %v", next)
	}
	ask := w.Step("ask")
	if ask.OnTimeout != "escalate" || ask.Timeout != 0 {
		t.Errorf("ask: on_timeout %q timeout %v", ask.OnTimeout, ask.Timeout)
	}
	if r := w.Step("refund").Catch; len(r) != 1 || !r[0].MatchesType("shell.exit") {
		t.Errorf("refund catch = %+v", r)
	}
	if err := w.ValidateInput(map[string]any{"order_id": "x"}); err != nil {
		t.Errorf("valid input rejected: %v", err)
	}
	if err := w.ValidateInput(map[string]any{}); !errors.Is(err, ErrInputInvalid) {
		t.Errorf("input without order_id: %v; want ErrInputInvalid", err)
	}
}

func TestForeachAndCall(t *testing.T) {
	w, _, err := Load("../workflows/fanout.tqw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := w.Steps[0].Foreach
	if f == nil || f.Concurrency != 4 || f.Action != "http" || w.Steps[0].Retry.MaxAttempts != 3 {
		t.Fatalf("foreach = %+v", f)
	}
	items, err := f.Items.Eval(&Env{Input: map[string]any{"urls": []any{"a", "b"}}})
	if err != nil || len(items.([]any)) != 2 {
		t.Fatalf("items = %v, %v", items, err)
	}
	// A header takes a string: the index arrives as text (issue 12).
	with, err := f.With.Eval(&Env{Item: "https://a", Index: 1})
	if err != nil || with.(map[string]any)["url"] != "https://a" || with.(map[string]any)["headers"].(map[string]any)["X-Item"] != "1" {
		t.Fatalf("with = %v, %v", with, err)
	}
	p, _, err := Load("../workflows/parent.tqw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Steps[0].Call; c == nil || c.Workflow != "./child.tqw.yaml" {
		t.Fatalf("call = %+v", c)
	}
}

func TestRetryDelay(t *testing.T) {
	p := &RetryPolicy{MaxAttempts: 10, Initial: time.Second, Multiplier: 2, MaxInterval: 5 * time.Second}
	for attempt, want := range map[int]time.Duration{1: 0, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second, 5: 5 * time.Second, 500: 5 * time.Second} {
		if got := p.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %v; want %v", attempt, got, want)
		}
	}
	if !p.RetriesType("timeout") || p.RetriesType("validation") || p.RetriesType("cancelled") {
		t.Error("default retry types wrong")
	}
}

func TestErrorTypes(t *testing.T) {
	for _, s := range append([]string{"custom.quota", "custom.a.b_c"}, ErrorTypes...) {
		if !isErrorType(s) {
			t.Errorf("isErrorType(%q) = false", s)
		}
	}
	for _, s := range []string{"", "custom", "custom.", "custom.A", "http", "Timeout", "custom..x"} {
		if isErrorType(s) {
			t.Errorf("isErrorType(%q) = true", s)
		}
	}
}

func TestExtraActions(t *testing.T) {
	src := []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    action: email\n    with: {to: x@y, subject: hi}\n  - id: b\n    action: notify\n")
	if _, diags, err := Parse("t.yaml", src); err == nil || diags[0].Code != CodeUnknownAction || !strings.Contains(diags[0].Hint, "http, llm") {
		t.Fatalf("unregistered action: %v %s", err, diags)
	}
	opts := Options{ExtraActions: map[string]json.RawMessage{
		"email":  json.RawMessage(`{"type":"object","required":["to"],"properties":{"to":{"type":"string"},"subject":{"type":"string"}},"additionalProperties":false}`),
		"notify": nil,
	}}
	w, diags, err := ParseWith("t.yaml", src, opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, diags)
	}
	if w.Steps[0].Action != "email" || w.Steps[1].Action != "notify" {
		t.Error("extra actions not kept")
	}
	bad := bytes.Replace(src, []byte("subject: hi"), []byte("subject: 3"), 1)
	_, diags, err = ParseWith("t.yaml", bad, opts)
	if err == nil || diags[0].Code != CodeWithSchema || diags[0].Line != 6 || !strings.Contains(diags[0].Message, "email") {
		t.Fatalf("bad extra with: %v %s", err, diags)
	}
}

func TestWarningsLeaveUsableWorkflow(t *testing.T) {
	src := []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    succeed: 1\n  - id: b\n    succeed: 2\n")
	w, diags, err := Parse("t.yaml", src)
	if err != nil || w == nil || len(diags) != 1 || diags[0].Severity != SeverityWarning || diags.HasErrors() {
		t.Fatalf("w=%v err=%v diags=%s", w != nil, err, diags)
	}
}

func TestComputedNextReachesEverything(t *testing.T) {
	src := []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    next: \"${ input.to }\"\n  - id: b\n    succeed: 1\n  - id: c\n    succeed: \"${ steps.a.output }\"\n")
	w, diags, err := Parse("t.yaml", src)
	if err != nil || len(diags) != 0 {
		t.Fatalf("%v %s", err, diags)
	}
	if v, err := w.Steps[0].Next.Eval(&Env{Input: map[string]any{"to": "c"}}); err != nil || v != "c" {
		t.Errorf("next = %v, %v", v, err)
	}
}

func TestLimits(t *testing.T) {
	big := append([]byte("tqw: v1\nname: t\nsteps: [{id: a, succeed: 1}]\n#"), bytes.Repeat([]byte("x"), 2000)...)
	_, diags, err := ParseWith("big.yaml", big, Options{Limits: Limits{MaxFileBytes: 1000}})
	if err == nil || diags[0].Code != CodeFileTooLarge {
		t.Errorf("file size bound: %v %s", err, diags)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, append(big, bytes.Repeat([]byte("y"), 1<<20)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, diags, err := Load(path); err == nil || diags[0].Code != CodeFileTooLarge {
		t.Errorf("Load of a file over 1 MiB: %v %s", err, diags)
	}
	_, diags, err = ParseWith("many.yaml", dslgen.Workflow(20), Options{Limits: Limits{MaxSteps: 10}})
	if err == nil || diags[0].Code != CodeTooManySteps {
		t.Errorf("step bound: %v %s", err, diags)
	}
	deep := "tqw: v1\nname: t\nvars: {x: " + strings.Repeat("[", 10) + strings.Repeat("]", 10) + "}\nsteps: [{id: a, succeed: 1}]\n"
	_, diags, err = ParseWith("deep.yaml", []byte(deep), Options{Limits: Limits{MaxDepth: 5}})
	if err == nil || diags[0].Code != CodeTooDeep {
		t.Errorf("depth bound: %v %s", err, diags)
	}
	if _, _, err := ParseWith("deep.yaml", []byte(deep), Options{}); err != nil {
		t.Errorf("default depth rejected 12 levels: %v", err)
	}
	if _, _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestAliasBound checks that a billion-laughs document fails fast with
// yaml.alias-bound instead of expanding.
func TestAliasBound(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("tqw: v1\nname: t\nvars:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		sb.WriteString("  l" + itoa(i) + ": &l" + itoa(i) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("*l" + itoa(i-1))
		}
		sb.WriteString("]\n")
	}
	sb.WriteString("steps: [{id: a, succeed: 1}]\n")
	start := time.Now()
	_, diags, err := Parse("laughs.yaml", []byte(sb.String()))
	if err == nil || diags[0].Code != CodeAliasBound {
		t.Fatalf("%v %s", err, diags)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("rejecting the document took %v", d)
	}
	// Small aliases are fine and share the anchor's position.
	ok := "tqw: v1\nname: t\nvars:\n  a: &a {k: 1}\n  b: *a\nsteps: [{id: a, succeed: \"${ vars.b.k }\"}]\n"
	if _, diags, err := Parse("ok.yaml", []byte(ok)); err != nil {
		t.Fatalf("%v %s", err, diags)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestGraph(t *testing.T) {
	w, _, err := Load("../workflows/refund.tqw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m, d bytes.Buffer
	if err := w.WriteMermaid(&m); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteDOT(&d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`s_decide -->|"vars.amount #gt; 100"| s_ask`, `s_decide -->|"else"| s_refund`,
		`s_ask -.->|"timeout"| s_escalate`, `s_refund -.->|"catch shell.exit"| s_escalate`, "s_notice --> s_done"} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("mermaid lacks %q:\n%s", want, m.String())
		}
	}
	for _, want := range []string{`"decide" -> "ask" [label="vars.amount > 100"]`, `"ask" -> "escalate" [label="timeout", style=dashed]`,
		`"refund" -> "escalate" [label="catch shell.exit", style=dashed]`} {
		if !strings.Contains(d.String(), want) {
			t.Errorf("dot lacks %q:\n%s", want, d.String())
		}
	}
	edges := w.Edges()
	if len(edges) != 10 {
		t.Errorf("%d edges; want 10: %+v", len(edges), edges)
	}
}

func TestDiagnosticString(t *testing.T) {
	d := Diagnostic{File: "f.yaml", Line: 3, Col: 5, Severity: SeverityError, Code: CodeUnknownField, Message: "m", Hint: "h"}
	if got := d.String(); got != "f.yaml:3:5: error: m [schema.unknown-field]\n\thint: h" {
		t.Errorf("String() = %q", got)
	}
	e := &InvalidError{Diagnostics: Diagnostics{d, d}}
	if e.Error() != "f.yaml:3:5: m (and 1 more errors)" || !errors.Is(e, ErrInvalid) {
		t.Errorf("InvalidError = %q", e.Error())
	}
}
