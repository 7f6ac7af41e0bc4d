package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/server/wire"
)

// forkFake answers each prompt by its first word, so a prompt reworded
// after its first word gets the same answer (the step after it then asks
// the same as before).
func forkFake(t *testing.T) *llmfake.Server {
	fake := llmfake.New()
	t.Cleanup(fake.Close)
	fake.Handle(func(r llmfake.Request) llmfake.Reply {
		p := r.Messages[len(r.Messages)-1].Content
		switch {
		case strings.HasPrefix(p, "Outline"):
			return llmfake.Reply{Content: "outline of owls", Usage: llmfake.Usage{PromptTokens: 10, CompletionTokens: 5}}
		case strings.HasPrefix(p, "Write"):
			// The revision's draft: the same text, a longer prompt.
			return llmfake.Reply{Content: "draft about owls", Usage: llmfake.Usage{PromptTokens: 25, CompletionTokens: 6}}
		case strings.HasPrefix(p, "Polish"):
			return llmfake.Reply{Content: "polished: " + p, Usage: llmfake.Usage{PromptTokens: 30, CompletionTokens: 7}}
		}
		return llmfake.Reply{Content: "draft about owls", Usage: llmfake.Usage{PromptTokens: 20, CompletionTokens: 6}}
	})
	return fake
}

func prompts(reqs []llmfake.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Messages[len(r.Messages)-1].Content)
	}
	return out
}

// A fork at a middle step starts there with the variables and outputs of
// its origin, asks nothing the origin already paid for, and shows the
// saving; a fork on a revision whose prompt changed asks that one prompt.
func TestForkReusesUnchangedAnswers(t *testing.T) {
	t.Parallel()
	fake := forkFake(t)
	c := newCLI(t)
	c.env = append(c.env, "OPENAI_BASE_URL="+fake.URL())
	wf := abs(t, "testdata/fork_chain.yaml")
	out, _ := c.must(0, "run", wf, "--run-id", "origin-1", "--input", `{"topic": "owls"}`)
	origin := strings.TrimSpace(out)
	if len(fake.Requests()) != 3 {
		t.Fatalf("origin made %d requests; want 3", len(fake.Requests()))
	}

	out, _ = c.must(0, "fork", "origin-1", "--at", "draft", "--run-id", "fork-same")
	if strings.TrimSpace(out) != "fork-same" {
		t.Fatalf("fork printed %q", out)
	}
	c.must(0, "worker", "--idle-exit")
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("the unchanged fork made %d new requests; want none: %q", n-3, prompts(fake.Requests()[3:]))
	}
	status, _ := c.must(0, "status", "fork-same", "--json")
	var st struct {
		State  string          `json:"state"`
		Result json.RawMessage `json:"result"`
		Fork   *struct {
			From string `json:"run_id"`
			At   string `json:"at"`
		} `json:"forked_from"`
		Totals struct {
			SavedTokens float64 `json:"llm_saved_tokens"`
			Tokens      float64 `json:"llm_tokens"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		t.Fatalf("%v\n%s", err, status)
	}
	if st.State != "succeeded" || string(st.Result) != origin {
		t.Fatalf("fork: %s %s; want the origin's result %s", st.State, st.Result, origin)
	}
	if st.Fork == nil || st.Fork.From != "origin-1" || st.Fork.At != "draft" {
		t.Fatalf("fork lineage %+v", st.Fork)
	}
	// draft (26 tokens) and polish (37) were reused, none paid.
	if st.Totals.SavedTokens != 63 || st.Totals.Tokens != 0 {
		t.Fatalf("totals: saved %v tokens, paid %v; want 63 saved, 0 paid", st.Totals.SavedTokens, st.Totals.Tokens)
	}
	hist, _ := c.must(0, "history", "fork-same")
	if strings.Contains(hist, "outline") || !strings.Contains(hist, "answer reused, saved") {
		t.Fatalf("fork history:\n%s", hist)
	}
	if d, _ := c.must(0, "diff", "origin-1", "fork-same"); !strings.Contains(d, "no difference") {
		t.Fatalf("diff of a fork that changed nothing:\n%s", d)
	}

	// The revision rewords draft's prompt: that one request is new.
	c.must(0, "fork", "origin-1", "--at", "draft", "--run-id", "fork-v2", "--definition", abs(t, "testdata/fork_chain_v2.yaml"))
	c.must(0, "worker", "--idle-exit")
	reqs := fake.Requests()
	if got := prompts(reqs[3:]); len(got) != 1 || got[0] != "Write a short draft from: outline of owls" {
		t.Fatalf("the fork on the revision asked %q; want only the changed draft prompt", got)
	}

	// A changed input reaches the steps that read it.
	c.must(0, "fork", "origin-1", "--at", "outline", "--run-id", "fork-input", "--input", `{"topic": "bats"}`)
	c.must(0, "worker", "--idle-exit")
	if got := prompts(fake.Requests()[4:]); len(got) != 0 {
		// vars.topic was evaluated from the origin's input before
		// outline: the fork keeps it, so nothing changes.
		t.Fatalf("fork at outline with a new input asked %q; vars set before the fork point keep their values", got)
	}

	js, _ := c.must(0, "diff", "origin-1", "fork-v2", "--json")
	var d wire.RunDiff
	if err := json.Unmarshal([]byte(js), &d); err != nil {
		t.Fatal(err)
	}
	// draft's output differs (its usage); polish, reused, does not.
	if len(d.Differences) != 1 || d.Differences[0].Step != "draft" || d.Differences[0].Kind != "output" || d.Differences[0].Index != 1 {
		t.Fatalf("diff: %s", js)
	}
	if text, _ := c.must(0, "diff", "origin-1", "fork-v2"); !strings.HasPrefix(text, "first step 1 draft: output ") {
		t.Fatalf("diff:\n%s", text)
	}

	// Refusals write nothing.
	before := c.snapshot()
	for _, args := range [][]string{
		{"fork", "origin-1", "--at", "nosuch"},
		{"fork", "origin-1", "--at", "draft", "--input", `{"topic": 7}`},
		{"fork", "origin-1"},
	} {
		if code, out, errOut := c.run(args...); code != exitUsage {
			t.Errorf("%v: exit %d; want %d\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
	if c.snapshot() != before {
		t.Error("a refused fork changed the store")
	}
}

// export → import into a fresh store → fork there, answers included; a
// folder changed after export is refused and writes nothing.
func TestExportImportFork(t *testing.T) {
	t.Parallel()
	fake := forkFake(t)
	c := newCLI(t)
	c.env = append(c.env, "OPENAI_BASE_URL="+fake.URL())
	c.must(0, "run", abs(t, "testdata/fork_chain.yaml"), "--run-id", "moved-1", "--input", `{"topic": "owls"}`)
	dir := filepath.Join(t.TempDir(), "moved")
	c.must(0, "export", "moved-1", dir)
	for _, f := range []string{"manifest.json", "records.jsonl", "input.json", "history.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("export lacks %s: %v", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "records.jsonl")); strings.Contains(string(b), "sk-test-key") {
		t.Fatal("the export holds the API key")
	}

	other := newCLI(t)
	other.env = c.env
	// A damaged copy is refused, and the store is left as it was.
	bad := filepath.Join(t.TempDir(), "bad")
	copyDir(t, dir, bad)
	in := filepath.Join(bad, "input.json")
	if err := os.WriteFile(in, []byte(`{"topic": "bats"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	before := other.snapshot()
	code, _, errOut := other.run("import", bad)
	if code != exitUsage || !strings.Contains(errOut, "input.json does not match its SHA-256") {
		t.Fatalf("import of a changed folder: exit %d\n%s", code, errOut)
	}
	if other.snapshot() != before {
		t.Fatal("a refused import wrote to the store")
	}

	other.must(0, "import", dir)
	if code, _, errOut := other.run("import", dir); code != exitUsage || !strings.Contains(errOut, "already holds") {
		t.Fatalf("a second import: exit %d\n%s", code, errOut)
	}
	// status says what the run is here, read from its records.
	if code, _, errOut := other.run("status", "moved-1"); code != exitFailed || !strings.Contains(errOut, "imported copy") || !strings.Contains(errOut, `last step "done": succeeded`) {
		t.Fatalf("status of an imported run: exit %d\n%s", code, errOut)
	}
	hist, _ := other.must(0, "history", "moved-1")
	if !strings.Contains(hist, "polish") {
		t.Fatalf("imported history:\n%s", hist)
	}
	other.must(0, "fork", "moved-1", "--at", "polish", "--run-id", "moved-fork")
	other.must(0, "worker", "--idle-exit")
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("the fork in the other store asked %q; the imported answers should serve it", prompts(fake.Requests()[3:]))
	}
	status, _ := other.must(0, "status", "moved-fork")
	if !strings.Contains(status, "succeeded") || !strings.Contains(status, "forked from moved-1 at polish") {
		t.Fatalf("status:\n%s", status)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// SIGKILL at random moments of `fork` leaves the store consistent (store
// check finds nothing), and the command started again with the same
// --run-id ends with exactly that one fork, which runs to the origin's
// result without asking the model again.
func TestForkSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes; not in -short")
	}
	t.Parallel()
	fake := forkFake(t)
	c := newCLI(t)
	c.env = append(c.env, "OPENAI_BASE_URL="+fake.URL())
	out, _ := c.must(0, "run", abs(t, "testdata/fork_chain.yaml"), "--run-id", "ko", "--input", `{"topic": "owls"}`)
	result := strings.TrimSpace(out)
	kills := crashtest.Count(t, "TQW_FORK_KILLS", 12)
	rng := crashtest.Rand(t, 1)

	forkCmd := func(id string) *exec.Cmd {
		cmd := exec.Command(tqwBin, "fork", "ko", "--at", "draft", "--run-id", id, "--store", c.store)
		cmd.Dir, cmd.Env = c.dir, append(os.Environ(), c.env...)
		return cmd
	}
	start := time.Now()
	c.must(0, "fork", "ko", "--at", "draft", "--run-id", "k-timing")
	span := max(time.Since(start), 20*time.Millisecond)
	killed := 0
	for k := range kills {
		id := fmt.Sprintf("k%03d", k)
		cmd := forkCmd(id)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		timer := time.NewTimer(time.Duration(rng.Int64N(int64(span))))
		select {
		case <-exited:
			timer.Stop()
		case <-timer.C:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if err := <-exited; err != nil && strings.Contains(err.Error(), "killed") {
				killed++
			}
		}
		// The same command again: it forks, or finds the fork made.
		if out, _ := c.must(0, "fork", "ko", "--at", "draft", "--run-id", id); strings.TrimSpace(out) != id {
			t.Fatalf("fork %s again printed %q", id, out)
		}
	}
	t.Logf("%d of %d fork commands killed", killed, kills)
	c.must(0, "store", "check")
	c.must(0, "worker", "--idle-exit")
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("the forks asked the model %d times; want none", n-3)
	}
	list, _ := c.must(0, "list", "--json", "--limit", "1000")
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var r struct {
			Run   string `json:"run"`
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		seen[r.Run]++
		if r.State != "succeeded" {
			t.Errorf("run %s is %s", r.Run, r.State)
		}
	}
	for k := range kills {
		id := fmt.Sprintf("k%03d", k)
		if seen[id] != 1 {
			t.Errorf("fork %s listed %d times", id, seen[id])
		}
		st, _ := c.must(0, "status", id, "--json")
		if !strings.Contains(st, `"result":`+result) {
			t.Errorf("fork %s: %s; want the result %s", id, st, result)
		}
	}
	if len(seen) != kills+2 {
		t.Errorf("%d runs in the store; want the origin, the timing fork and %d forks", len(seen), kills)
	}
	c.must(0, "store", "check")
}
