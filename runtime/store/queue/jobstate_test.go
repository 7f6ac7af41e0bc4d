package queue

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
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

// readJobState reads what readRecord reads as State and Headers[name],
// from records written by the hand codec and by the library (whose
// encodings of lengths and integers differ), long fields included.
func TestReadJobStateMatchesReadRecord(t *testing.T) {
	long := strings.Repeat("x", 300)
	recs := []*record{
		sampleRecord(),
		{V: 1, ID: "a", Queue: "q", State: StatePending},
		{V: 2, ID: long, Queue: "q", State: StateScheduled, Attempts: 300, Seq: math.MaxUint64, Inline: []byte(long),
			WakePayload: make([]byte, 70000), LastError: long, EnqueuedAt: -1, RunAt: math.MinInt64,
			Headers: map[string]string{long: "", "k": long, "wait": "w"},
			History: []attemptRecord{{N: 1, ClaimedAt: -200, Outcome: "o"}}},
	}
	for i, r := range recs {
		lib, err := msgpack.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{lib, appendRecord(nil, r)} {
			agreeJobState(t, b)
			for _, name := range []string{"wait", "a", "k", long, "none"} {
				st, v, err := readJobState(b, name)
				if err != nil || st != r.State || v != r.Headers[name] {
					t.Errorf("record %d, header %.10q: readJobState = %q, %q, %v; want %q, %q", i, name, st, v, err, r.State, r.Headers[name])
				}
			}
		}
	}
	for name, b := range hostileRecords {
		if _, _, err := readJobState(b, "x"); err == nil {
			t.Errorf("hostile record %s: readJobState accepted it", name)
		}
	}
}

// agreeJobState fails t unless readJobState of b agrees with decodeRecord:
// a record decodeRecord accepts reads the same state and headers.
func agreeJobState(t *testing.T, b []byte) {
	t.Helper()
	r, err := decodeRecord(b)
	if err != nil {
		return
	}
	for _, name := range []string{"a", "wait", ""} {
		st, v, err := readJobState(b, name)
		if err != nil || st != r.State || v != r.Headers[name] {
			t.Fatalf("readJobState(%x, %q) = %q, %q, %v; decodeRecord read %q, %q", b, name, st, v, err, r.State, r.Headers[name])
		}
	}
	for name, want := range r.Headers {
		if _, v, err := readJobState(b, name); err != nil || v != want {
			t.Fatalf("readJobState(%x, %q) header %q, %v; decodeRecord read %q", b, name, v, err, want)
		}
	}
}

// FuzzReadJobState: readJobState never panics nor allocates toward what a
// record declares, and agrees with decodeRecord on every record that
// decodes.
func FuzzReadJobState(f *testing.F) {
	for _, r := range []*record{sampleRecord(), {ID: "x", Queue: "y", State: StateScheduled, Headers: map[string]string{"wait": "k"}}} {
		b, _ := encodeRecord(r)
		f.Add(b)
		lib, _ := msgpack.Marshal(r)
		f.Add(lib)
	}
	for _, b := range hostileRecords {
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa1, 'h', 0xc0})
	golden.AddCorpus(f, "testdata/golden/job.v*.bin")
	f.Fuzz(func(t *testing.T, data []byte) {
		allocbound.Check(t, len(data), func() { _, _, _ = readJobState(data, "wait") })
		agreeJobState(t, data)
	})
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
