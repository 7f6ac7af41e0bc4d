package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

const (
	killChildEnv = "TQW_QUEUE_KILL_CHILD" // store folder; set only in the child
	killSeedEnv  = "TQW_QUEUE_KILL_SEED"
	killCountEnv = "TQW_QUEUE_KILLS" // kills in TestKill9; default 200
)

func TestMain(m *testing.M) {
	crashtest.IfChild(killChildEnv, func(dir string) error {
		seed, _ := strconv.ParseUint(os.Getenv(killSeedEnv), 10, 64)
		return killChild(dir, seed)
	})
	os.Exit(m.Run())
}

// killOptions configure the queue of the crash test: quick retries, many
// attempts, a WAL that checkpoints often so reopening stays fast.
func killOptions() Options {
	o := Options{
		DefaultConfig: QueueConfig{MaxAttempts: 8, LeaseDuration: time.Minute, BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond},
		ReapInterval:  50 * time.Millisecond,
		Logger:        quietLogger(),
	}
	o.KV.CheckpointWALObjects = 100
	return o
}

// fxKeys are the caller-KV keys a settlement of job id writes; the
// follow-up job "f-<id>" is enqueued in the same commit and its own ack
// writes "fd/<id>".
func fxEffects(id string) *SettlementEffects {
	return &SettlementEffects{
		Enqueue: []NewJob{{Queue: "follow", Payload: []byte(id), Options: EnqueueOptions{ID: "f-" + id}}},
		KVPuts:  []KVWrite{{"fx/" + id + "/a", []byte(id)}, {"fx/" + id + "/b", []byte(id)}},
	}
}

// killChild runs producers and workers on the store in dir until the
// parent kills it. It prints "E <id>" after an enqueue returned, "A <id>"
// after an ack and "D <id>" after a dead-letter returned: facts the queue
// must keep.
func killChild(dir string, seed uint64) error {
	ctx := context.Background()
	st, err := file.Open(dir)
	if err != nil {
		return err
	}
	q, err := Open(ctx, st, killOptions())
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...) // one write: whole lines only
	}
	say("ready")
	errc := make(chan error, 8)
	for p := range 2 {
		go func() {
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			for n := 0; n < 40; n++ {
				id := fmt.Sprintf("j-%d-%d-%d", seed, p, n)
				var err error
				switch rng.IntN(3) {
				case 0:
					_, err = q.Enqueue(ctx, "q", []byte(id), EnqueueOptions{ID: id})
				case 1:
					_, err = q.EnqueueWithKV(ctx, "q", []byte(id), EnqueueOptions{ID: id}, []KVWrite{{"meta/" + id, []byte(id)}})
				default:
					ids := []string{id, id + "-b"}
					_, err = q.EnqueueBatch(ctx, []NewJob{{Queue: "q", Payload: []byte(ids[0]), Options: EnqueueOptions{ID: ids[0]}}, {Queue: "q", Payload: []byte(ids[1]), Options: EnqueueOptions{ID: ids[1]}}})
					if err == nil {
						say("E %s", ids[1])
					}
				}
				if err != nil {
					errc <- err
					return
				}
				say("E %s", id)
			}
		}()
	}
	for w := range 3 {
		go func() {
			rng := rand.New(rand.NewPCG(seed, 100+uint64(w)))
			for {
				c, err := q.ClaimWait(ctx, "q")
				if err != nil {
					errc <- err
					return
				}
				id := string(c.Job.Payload)
				switch r := rng.IntN(20); {
				case r < 4:
					_, err = q.Nack(ctx, c, "transient", fxEffects(id))
				case r < 5:
					if err = q.DeadLetter(ctx, c, "poison", fxEffects(id)); err == nil {
						say("D %s", id)
					}
				default:
					if err = q.Ack(ctx, c, fxEffects(id)); err == nil {
						say("A %s", id)
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	go func() {
		for {
			c, err := q.ClaimWait(ctx, "follow")
			if err == nil {
				err = q.Ack(ctx, c, &SettlementEffects{KVPuts: []KVWrite{{"fd/" + string(c.Job.Payload), nil}}})
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	return <-errc
}

// TestKill9 runs producers and workers in a subprocess, SIGKILLs it at
// random points (after a random number of reported operations) and
// reopens, many times. Then it drains the queue and checks that every
// acknowledged enqueue was acked or is dead, that no acked job lost its
// effects, and that the effects of every settlement are all there or all
// absent.
func TestKill9(t *testing.T) {
	crashtest.Parent(t, killChildEnv)
	kills := crashtest.Count(t, killCountEnv, 200)
	dir := t.TempDir()
	rng := crashtest.Rand(t, 7)
	enqueued, acked, dead := map[string]bool{}, map[string]bool{}, map[string]bool{}
	start := time.Now()
	for k := range kills {
		c := crashtest.Start(t, crashtest.Command(context.Background(), "^$", killChildEnv+"="+dir, fmt.Sprintf("%s=%d", killSeedEnv, k)))
		// Kill after a random number of lines: 0 kills during Open. Read
		// on to the end: lines printed before the kill are facts too.
		killAt := rng.IntN(25)
		for n := 0; ; n++ {
			line, ok := c.Line()
			if !ok {
				break
			}
			if f := strings.Fields(line); len(f) == 2 {
				switch f[0] {
				case "E":
					enqueued[f[1]] = true
				case "A":
					acked[f[1]] = true
				case "D":
					dead[f[1]] = true
				}
			}
			if n == killAt {
				if err := c.Signal(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := c.Reap(); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
	}
	t.Logf("%d kills in %v: %d enqueues, %d acks, %d dead-letters acknowledged", kills, time.Since(start).Round(time.Millisecond), len(enqueued), len(acked), len(dead))
	if len(enqueued) < kills {
		t.Fatalf("only %d enqueues in %d runs: the children did too little to test anything", len(enqueued), kills)
	}

	st, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Generous: the drain makes many durable commits on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q, err := Open(ctx, st, killOptions())
	if err != nil {
		t.Fatalf("final open: %v", err)
	}
	defer q.Close()
	checkEffectsAtomic(t, q)
	for id := range acked {
		if !hasKV(t, q, "fx/"+id+"/a") {
			t.Fatalf("job %s: ack returned but its effects are gone", id)
		}
	}
	// Drain: ack everything left, including follow-ups, with parallel acks
	// so they share WAL writes.
	for _, name := range []string{"q", "follow"} {
		for {
			s, err := q.Stats(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if s.Pending+s.Scheduled+s.Claimed == 0 {
				break
			}
			cs, err := q.ClaimBatch(ctx, name, 64)
			if err != nil {
				t.Fatalf("drain %s: %v (stats %+v)", name, err, s)
			}
			if len(cs) == 0 { // only scheduled retries left: wait for one
				c, err := q.ClaimWait(ctx, name)
				if err != nil {
					t.Fatalf("drain %s: %v (stats %+v)", name, err, s)
				}
				cs = append(cs, c)
			}
			errs := make(chan error, len(cs))
			for _, c := range cs {
				go func() {
					eff := &SettlementEffects{KVPuts: []KVWrite{{"fd/" + string(c.Job.Payload), nil}}}
					if name == "q" {
						eff = fxEffects(string(c.Job.Payload))
					}
					errs <- q.Ack(ctx, c, eff)
				}()
			}
			for range cs {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	checkEffectsAtomic(t, q)
	deadN := 0
	for id := range enqueued {
		j, err := q.GetJob(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound): // acked and deleted: its effects must all be there
			if !hasKV(t, q, "fx/"+id+"/a") || !hasKV(t, q, "fd/"+id) || dead[id] {
				t.Fatalf("job %s: acknowledged enqueue is gone without its ack's effects", id)
			}
		case err != nil:
			t.Fatal(err)
		case j.State == StateDead:
			deadN++
		default:
			t.Fatalf("job %s is %s after the drain", id, j.State)
		}
	}
	checkInvariants(t, &fixture{t: t, q: q}, "q", "follow")
	t.Logf("after drain: %d acknowledged enqueues, %d dead, the rest acked with all effects", len(enqueued), deadN)
}

func hasKV(t *testing.T, q *Queue, key string) bool {
	t.Helper()
	_, err := q.KVGet(context.Background(), key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// scanAll returns every caller-KV key under prefix.
func scanAll(t *testing.T, q *Queue, prefix string) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	after := ""
	for {
		page, err := q.KVScan(context.Background(), prefix, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return keys
		}
		for _, e := range page {
			keys[e.Key] = true
		}
		after = page[len(page)-1].Key
	}
}

// checkEffectsAtomic checks that the effects of every settlement are all
// present or all absent (both KV puts, and the follow-up job, which
// exists or has been acked, leaving fd/<id>), and that every EnqueueWithKV
// entry belongs to a job that exists or was settled.
func checkEffectsAtomic(t *testing.T, q *Queue) {
	t.Helper()
	ctx := context.Background()
	fx, fd := scanAll(t, q, "fx/"), scanAll(t, q, "fd/")
	settled := map[string]bool{}
	for k := range fx {
		settled[strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(k, "fx/"), "/a"), "/b")] = true
	}
	for id := range settled {
		if !fx["fx/"+id+"/a"] || !fx["fx/"+id+"/b"] {
			t.Fatalf("job %s: only part of its settlement's KV effects is present", id)
		}
		if _, err := q.GetJob(ctx, "f-"+id); errors.Is(err, ErrNotFound) && !fd["fd/"+id] {
			t.Fatalf("job %s: KV effects present but the follow-up job was never enqueued", id)
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	for k := range fd {
		if id := strings.TrimPrefix(k, "fd/"); !settled[id] {
			t.Fatalf("follow-up of job %s ran but the settlement that enqueued it left no KV effects", id)
		}
	}
	for k := range scanAll(t, q, "meta/") {
		id := strings.TrimPrefix(k, "meta/")
		if _, err := q.GetJob(ctx, id); errors.Is(err, ErrNotFound) && !settled[id] {
			t.Fatalf("EnqueueWithKV entry %s without its job", k)
		}
	}
	t.Logf("effects all-or-nothing for %d settled jobs", len(settled))
}
