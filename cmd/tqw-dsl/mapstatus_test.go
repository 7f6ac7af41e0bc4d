package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// status shows a running map's progress, as the HTTP run view does: an
// item that succeeded, one that failed (tolerated) and one waiting on a
// signal are 1 done, 1 failed of 3, in text and --json; once the last
// item ended and the run finished, status shows no progress. Through the
// binary.
func TestStatusShowsMapProgress(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := c.writeWorkflow("m.tqw.yaml", `tqw: v1
name: m
steps:
  - id: each
    map:
      items: "${ input.items }"
      concurrency: 3
      tolerated_failures: 1
      steps:
        - id: route
          switch:
            - when: item == "fail"
              next: broken
            - when: item == "wait"
              next: hold
          next: fine
        - id: fine
          succeed: "${ item }"
        - id: broken
          fail: "item ${ index } broke"
        - id: hold
          action: wait_signal
          with: {key: "hold:${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ output.done }"
`)
	c.must(0, "submit", wf, "--run-id", "m1", "--input", `{"items": ["ok", "fail", "wait"]}`)
	c.must(0, "worker", "--idle-exit")

	out, _ := c.must(0, "status", "m1", "--json")
	var st struct {
		State string `json:"state"`
		Map   *struct {
			Step                string
			Done, Failed, Total int
		} `json:"map_progress"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Map == nil || st.Map.Step != "each" || st.Map.Done != 1 || st.Map.Failed != 1 || st.Map.Total != 3 {
		t.Fatalf("status --json map_progress of a map with 1 item done, 1 failed, 1 waiting: %s", out)
	}
	if out, _ = c.must(0, "status", "m1"); !strings.Contains(out, "map        step each: 1 done, 1 failed of 3\n") {
		t.Fatalf("status does not show the map's progress:\n%s", out)
	}

	// The waiting item is the one waiting run besides the parent.
	out, _ = c.must(0, "list", "--json", "--status", "waiting")
	var item string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct{ Run string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("list --json: %v\n%s", err, out)
		}
		if r.Run != "m1" {
			item = r.Run
		}
	}
	if item == "" {
		t.Fatalf("no waiting item run in:\n%s", out)
	}
	c.must(0, "signal", "hold:"+item, `"late"`)
	c.must(0, "worker", "--idle-exit")
	if out, _ = c.must(0, "status", "m1", "--json"); !strings.Contains(out, `"state":"succeeded"`) || strings.Contains(out, "map_progress") {
		t.Fatalf("status --json of the finished map run: %s", out)
	}
}
