package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run --label adds labels to the file's (a flag wins on its key), the
// declared outputs are the result, status and list --json show the
// labels, and list --label finds the run by them. Through the binary.
func TestRunLabelsAndOutputs(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := abs(t, "../../workflows/labels.tqw.yaml")
	input := `{"order_id": "A-17", "lines": [{"qty": 2, "price": 3.5}, {"qty": 1, "price": 10}]}`
	out, _ := c.must(0, "run", wf, "--input", input, "--run-id", "r1", "--label", "env=test", "--label", "team=ops")
	if strings.TrimSpace(out) != `{"lines":"2","message":"order A-17 adds up to 17","order":"A-17","total":17}` {
		t.Fatalf("result %q; want the declared outputs", out)
	}
	out, _ = c.must(0, "status", "r1", "--json")
	var st struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"workflow": "order-total", "team": "ops", "order": "A-17", "env": "test"}
	if len(st.Labels) != len(want) {
		t.Fatalf("status labels %v; want %v", st.Labels, want)
	}
	for k, v := range want {
		if st.Labels[k] != v {
			t.Fatalf("status labels %v; want %v", st.Labels, want)
		}
	}
	if out, _ = c.must(0, "status", "r1"); !strings.Contains(out, "labels     env=test order=A-17 team=ops\n") {
		t.Fatalf("status does not show the labels:\n%s", out)
	}
	if out, _ = c.must(0, "list", "--json", "--label", "order=A-17"); !strings.Contains(out, `"run":"r1"`) || !strings.Contains(out, `"team":"ops"`) {
		t.Fatalf("list --label order=A-17: %s", out)
	}
	if out, _ = c.must(0, "list", "--json", "--label", "team=payments"); strings.TrimSpace(out) != "" {
		t.Fatalf("list --label team=payments found %s; the flag won over the file", out)
	}
}

// A label the rules refuse, from the flags or from the file's template on
// this input, is exit 2 with the label named, and nothing is written.
func TestSubmitRefusesBadLabels(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := filepath.Join(c.dir, "w.tqw.yaml")
	if err := os.WriteFile(wf, []byte("tqw: v1\nname: w\nlabels: {order: \"${ input.order }\"}\nsteps: [{id: a, succeed: 1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.must(0, "submit", wf, "--input", `{"order": "o1"}`, "--run-id", "ok1")
	before := c.snapshot()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--input", `{"order": 5}`}, "label order at 3:17: the template evaluates to the number 5, not a string"},
		{[]string{"--input", `{"order": "o"}`, "--label", "workflow=x"}, `the label "workflow" is the workflow's name`},
		{[]string{"--input", `{"order": "o"}`, "--label", "bad key=v"}, `key "bad key"`},
		{[]string{"--input", `{"order": "o"}`, "--label", "novalue"}, `--label "novalue": want key=value`},
	} {
		for _, cmd := range []string{"submit", "run"} {
			_, errOut := c.must(2, append([]string{cmd, wf, "--run-id", "bad1"}, tc.args...)...)
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("%s %v: stderr %q; want %q", cmd, tc.args, errOut, tc.want)
			}
		}
	}
	if after := c.snapshot(); after != before {
		t.Fatal("a refused submission changed the store")
	}
}

// A long loop's history keeps the latest --history-visits visits of each
// step and says how many it dropped; run follows it to its end.
func TestRunLoopKeepsTheLatestVisits(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out, _ := c.must(0, "run", abs(t, "../../workflows/loop.tqw.yaml"), "--input", `{"n": 20}`, "--run-id", "l1", "--history-visits", "5")
	if strings.TrimSpace(out) != `{"last":"poll 20","polls":20}` {
		t.Fatalf("result %q", out)
	}
	out, _ = c.must(0, "history", "l1")
	if !strings.Contains(out, "step poll: 15 earlier visits not kept") || !strings.Contains(out, "step again: 15 earlier visits not kept") {
		t.Fatalf("history does not say what it dropped:\n%s", out)
	}
	if n := strings.Count(out, " poll "); n != 5 {
		t.Fatalf("history shows %d poll records; want 5:\n%s", n, out)
	}
	out, _ = c.must(0, "history", "l1", "--json")
	if !strings.Contains(out, `"dropped_visits":15`) {
		t.Fatalf("history --json lacks dropped_visits:\n%s", out)
	}
	_, errOut := c.must(2, "run", abs(t, "../../workflows/loop.tqw.yaml"), "--history-visits", "0")
	if !strings.Contains(errOut, "--history-visits 0: want at least 1, or -1") {
		t.Fatalf("--history-visits 0: %s", errOut)
	}
}
