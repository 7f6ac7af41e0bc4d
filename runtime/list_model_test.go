package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// An id whose ended run is still in the KV and that runs again is listed
// by its active copy alone: a listing of ended states skips the active
// runs unread, and must not list the older result in their place.
func TestListRunsByStateHidesTheResultOfAnIDActiveAgain(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), waitingRecorder{}, Options{ResultRetention: time.Hour})
	e.start()
	for i := range 4 {
		id := fmt.Sprintf("run-%04d", i)
		e.submit(RunSpec{RunID: id, Input: []byte("ok")})
		e.waitRun(id, inState(runstate.StateSucceeded))
	}
	e.submit(RunSpec{RunID: "run-0002", Input: []byte("wait")})
	e.waitRun("run-0002", inState(runstate.StateWaiting))

	for _, desc := range []bool{false, true} {
		page, err := e.rt.Inspector().ListRuns(e.ctx, runstate.ListOptions{States: []runstate.State{runstate.StateSucceeded}, Descending: desc})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range page {
			got = append(got, st.RunID)
		}
		want := []string{"run-0000", "run-0001", "run-0003"}
		if desc {
			slices.Reverse(want)
		}
		if !slices.Equal(got, want) {
			t.Errorf("succeeded runs (descending %v): %v; want %v (run-0002 waits again)", desc, got, want)
		}
	}
}
