package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/netfault"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
)

// outageWorkflow has steps that each record when they ran.
const outageWorkflow = `tqw: v1
name: outage
input: {type: object, required: [log], properties: {log: {type: string}}}
steps:
%s  - id: done
    succeed: "${ vars.n }"
`

const outageStep = `  - id: s%d
    action: shell
    with:
      command: 'printf "%%s %%s %%s\n" "$(date +%%s%%N)" "$RUN" "$STEP" >> "$LOG"; sleep 0.15'
      env: {RUN: "${ run.id }", STEP: s%d, LOG: "${ input.log }"}
    set: {n: "${ (vars.n ?? 0) + 1 }"}
`

// lineAt is a line a process printed and when the test read it.
type lineAt struct {
	at   time.Time
	line string
}

// TestStoreOutage cuts the network between tqw-dsl and the S3 server in
// the middle of multi-step runs, holds it down for seconds and brings it
// back: no step starts and none is reported complete while the store is
// away, tqw-dsl says the store is unreachable (and when it is back), and
// every run finishes with the right result.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("outage test skipped in -short mode")
	}
	cfg := s3test.Config(t)
	proxy, err := netfault.Start(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	c := newCLI(t)
	c.store = fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=1", cfg.Bucket, cfg.Prefix, proxy.Addr())
	c.env = append(c.env, "AWS_ACCESS_KEY_ID="+cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+cfg.SecretKey)
	c.open = func() (objstore.Store, error) { return s3.New(cfg) }

	const steps = 14
	var b strings.Builder
	for i := 1; i <= steps; i++ {
		fmt.Fprintf(&b, outageStep, i, i)
	}
	wf := filepath.Join(c.dir, "outage.yaml")
	if err := os.WriteFile(wf, []byte(fmt.Sprintf(outageWorkflow, b.String())), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(c.dir, "steps.log")
	input := fmt.Sprintf(`{"log": %q}`, log)
	const others = 3
	for i := range others {
		c.must(0, "submit", wf, "--run-id", fmt.Sprintf("o%d", i), "--input", input)
	}

	cmd := exec.Command(tqwBin, "run", wf, "--input", input, "--json", "--store", c.store)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []lineAt
	ended := 0
	endedCh := make(chan int, 1000)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := lineAt{at: time.Now(), line: sc.Text()}
			mu.Lock()
			lines = append(lines, l)
			if strings.Contains(l.line, `"event":"end"`) {
				ended++
				endedCh <- ended
			}
			mu.Unlock()
		}
	}()
	deadline := time.After(waitDeadline)
	for n := 0; n < 3; {
		select {
		case n = <-endedCh:
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("the run reported no 3 steps within %v:\n%s", waitDeadline, stderr.String())
		}
	}
	downAt := time.Now()
	proxy.Down()
	time.Sleep(5 * time.Second) // the outage under test: the store is away this long
	upAt := time.Now()
	proxy.Up()
	exited := make(chan error, 1)
	go func() { <-readDone; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("run after the outage: %v\n%s", err, stderr.String())
		}
	case <-time.After(2 * waitDeadline):
		_ = cmd.Process.Kill()
		t.Fatalf("run did not finish after the outage:\n%s", stderr.String())
	}
	c.must(0, "worker", "--idle-exit")

	// A step whose settlement was durable just before the cut may still be
	// printed within the grace; after it nothing may start or complete.
	grace := time.Second
	quiet := func(at time.Time) bool { return at.After(downAt.Add(grace)) && at.Before(upAt) }
	sawDown, sawUp := false, false
	for _, l := range lines {
		var ev struct {
			Event  string    `json:"event"`
			Time   time.Time `json:"time"`
			Step   string    `json:"step"`
			Status string    `json:"status"`
		}
		if err := json.Unmarshal([]byte(l.line), &ev); err != nil {
			t.Errorf("run --json printed a line that is not JSON: %q", l.line)
			continue
		}
		switch ev.Event {
		case "start":
			if quiet(ev.Time) {
				t.Errorf("step %s started at %v, during the outage (%v to %v)", ev.Step, ev.Time, downAt, upAt)
			}
		case "end":
			if quiet(l.at) {
				t.Errorf("step %s reported %s at %v, during the outage (%v to %v)", ev.Step, ev.Status, l.at, downAt, upAt)
			}
		case "store_unreachable":
			if l.at.Before(downAt) || l.at.After(upAt.Add(grace)) {
				t.Errorf("store_unreachable at %v, outside the outage (%v to %v)", l.at, downAt, upAt)
			}
			sawDown = true
		case "store_reachable":
			if l.at.Before(upAt) {
				t.Errorf("store_reachable at %v, before the store came back at %v", l.at, upAt)
			}
			sawUp = true
		}
	}
	if !sawDown || !sawUp {
		t.Errorf("run --json reported store_unreachable %v and store_reachable %v; want both:\n%v", sawDown, sawUp, lines)
	}

	// The steps' own record of when they ran, all runs included.
	b2, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	perRun := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b2)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("steps.log: malformed line %q", line)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("steps.log: %q: %v", line, err)
		}
		if at := time.Unix(0, ns); quiet(at) {
			t.Errorf("step %s of run %s ran at %v, during the outage (%v to %v)", f[2], f[1], at, downAt, upAt)
		}
		perRun[f[1]]++
	}
	if len(perRun) != others+1 {
		t.Errorf("steps ran for %d runs; want %d", len(perRun), others+1)
	}
	out, _ := c.must(0, "list", "--json")
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		var st runJSON
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		n++
		if st.State != "succeeded" || string(st.Result) != strconv.Itoa(steps) {
			t.Errorf("run %s: %s %s %s; want succeeded with %d", st.RunID, st.State, st.Result, st.Error, steps)
		}
	}
	if n != others+1 {
		t.Errorf("%d runs listed; want %d", n, others+1)
	}
	t.Logf("outage of %v; %d step executions recorded for %d runs", upAt.Sub(downAt), len(strings.Split(strings.TrimSpace(string(b2)), "\n")), len(perRun))
}
