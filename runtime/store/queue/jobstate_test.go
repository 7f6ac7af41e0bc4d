package queue

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// JobState reports what GetJob reports as State and Headers[name], for a
// job in every state, with and without the header, with an inline and a
// separate payload; and ErrNotFound for a missing job.
func TestJobStateMatchesGetJob(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.DefaultConfig.KeepDoneJobs = time.Hour })
	ctx := ctxT(t)
	hdr := map[string]string{"a": "1", "wait": "key-7", "z": strings.Repeat("x", 300)}
	big := strings.Repeat("p", 4096)
	var ids []string
	ids = append(ids, f.enqueue("q", "pending", EnqueueOptions{Headers: hdr}))
	ids = append(ids, f.enqueue("q", big, EnqueueOptions{Headers: map[string]string{"a": "2"}}))
	ids = append(ids, f.enqueue("q", "scheduled", EnqueueOptions{Headers: hdr, RunAt: t0.Add(time.Hour)}))
	ids = append(ids, f.enqueue("q", "plain", EnqueueOptions{}))
	claimed := f.claim("q") // the first
	ids = append(ids, f.enqueue("d", "done", EnqueueOptions{Headers: hdr}))
	if err := f.q.Ack(ctx, f.claim("d"), nil); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, f.enqueue("x", "dead", EnqueueOptions{Headers: hdr}))
	if err := f.q.DeadLetter(ctx, f.claim("x"), "boom", nil); err != nil {
		t.Fatal(err)
	}
	seen := map[State]bool{}
	for _, id := range ids {
		j := f.job(id)
		seen[j.State] = true
		for _, name := range []string{"wait", "a", "missing"} {
			st, v, err := f.q.JobState(ctx, id, name)
			if err != nil || st != j.State || v != j.Headers[name] {
				t.Errorf("JobState(%s, %q) = %q, %q, %v; GetJob says %q, %q", id, name, st, v, err, j.State, j.Headers[name])
			}
		}
	}
	for _, st := range []State{StatePending, StateScheduled, StateClaimed, StateDone, StateDead} {
		if !seen[st] {
			t.Errorf("no job in state %q checked", st)
		}
	}
	if claimed.Job.ID != ids[0] {
		t.Fatalf("claimed %s, want %s", claimed.Job.ID, ids[0])
	}
	if _, _, err := f.q.JobState(ctx, "01NOSUCHJOB", "wait"); !errors.Is(err, ErrNotFound) {
		t.Errorf("JobState of a missing job: err %v, want ErrNotFound", err)
	}
	r, err := OpenReader(ctx, f.store, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st, v, err := r.JobState(ctx, ids[2], "wait"); err != nil || st != StateScheduled || v != "key-7" {
		t.Errorf("Reader.JobState = %q, %q, %v; want scheduled, key-7", st, v, err)
	}
}

// A corrupt job record is reported, not read as a job without state.
func TestJobStateCorrupt(t *testing.T) {
	for _, b := range [][]byte{{0x81, 0xa2, 's', 't', 0xa3, 'b', 'a', 'd'}, {0x81, 0xa1, 'h'}, {0x80}} {
		st, _, err := readJobState(b, "x")
		if err == nil {
			switch st {
			case StatePending, StateScheduled, StateClaimed, StateDone, StateDead:
				t.Errorf("readJobState(%x) = %q, want an error or an unknown state", b, st)
			}
		}
	}
}
