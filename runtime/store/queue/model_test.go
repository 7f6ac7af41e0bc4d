package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// modelJob is the model's view of one job.
type modelJob struct {
	id        string
	state     State
	attempts  int
	prio      int
	rank      int // FIFO position among pending jobs; equal ranks are unordered
	runAt     time.Time
	dedup     string
	cancelReq bool
}

type model struct {
	jobs   map[string]*modelJob
	holder map[string]string // dedup key -> id
	rank   int
}

func (m *model) nextRank() int { m.rank++; return m.rank }

func (m *model) release(j *modelJob) {
	if j.dedup != "" && m.holder[j.dedup] == j.id {
		delete(m.holder, j.dedup)
	}
}

func (m *model) reacquire(j *modelJob) {
	if j.dedup != "" {
		if _, held := m.holder[j.dedup]; !held {
			m.holder[j.dedup] = j.id
		}
	}
}

func (m *model) sorted() []*modelJob {
	out := make([]*modelJob, 0, len(m.jobs))
	for _, j := range m.jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

func (m *model) stats() Stats {
	var s Stats
	for _, j := range m.jobs {
		switch j.state {
		case StatePending:
			s.Pending++
		case StateScheduled:
			s.Scheduled++
		case StateClaimed:
			s.Claimed++
		case StateDead:
			s.Dead++
		}
	}
	return s
}

// requeue models the end of a claim without settlement (reap, crash).
func (m *model) requeue(j *modelJob, rank, maxAttempts int) {
	if j.attempts >= maxAttempts {
		j.state = StateDead
		return
	}
	j.state, j.rank = StatePending, rank
	m.reacquire(j)
}

// TestModel runs random operation sequences against the queue and an
// in-memory model of its semantics, comparing claim order, outcomes and
// counts after every step.
// TQW_QUEUE_MODEL_SEEDS raises the number of seeds (default 4) for a
// longer search.
func TestModel(t *testing.T) {
	seeds := uint64(4)
	if v := os.Getenv("TQW_QUEUE_MODEL_SEEDS"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("TQW_QUEUE_MODEL_SEEDS=%q: want a positive whole number", v)
		}
		seeds = n
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runModel(t, seed, 600) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	const maxAttempts, lease = 3, 10 * time.Second
	cfg := QueueConfig{MaxAttempts: maxAttempts, LeaseDuration: lease, BackoffBase: time.Second, BackoffMax: 4 * time.Second}
	f := newFixture(t, func(o *Options) {
		o.DefaultConfig = cfg
		o.ReapInterval = 1000 * time.Hour // Reap is a model step
		o.KV.CheckpointWALObjects = 64    // keeps the many reopens cheap
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 42))
	m := &model{jobs: map[string]*modelJob{}, holder: map[string]string{}}
	type live struct {
		c       *Claim
		claimed time.Time
	}
	var claims []live // current and stale claims
	n := 0
	pick := func(states ...State) *modelJob {
		var ids []string
		for id, j := range m.jobs {
			for _, s := range states {
				if j.state == s {
					ids = append(ids, id)
				}
			}
		}
		if len(ids) == 0 {
			return nil
		}
		sort.Strings(ids)
		return m.jobs[ids[rng.IntN(len(ids))]]
	}
	for step := range steps {
		op := rng.IntN(100)
		var what string
		switch {
		case op < 25: // enqueue
			n++
			id := fmt.Sprint("j", n)
			o := EnqueueOptions{ID: id, Priority: prio(rng.IntN(2))}
			if rng.IntN(3) == 0 {
				o.DedupKey = fmt.Sprint("k", rng.IntN(4))
			}
			if rng.IntN(3) == 0 {
				o.RunAt = f.clock.Now().Add(time.Duration(1+rng.IntN(5)) * time.Second)
			}
			what = fmt.Sprintf("enqueue %s %+v", id, o)
			res, err := f.q.Enqueue(ctx, "q", []byte(id), o)
			if err != nil {
				t.Fatal(err)
			}
			if h, held := m.holder[o.DedupKey]; o.DedupKey != "" && held {
				if !res.Duplicate || res.ID != h {
					t.Fatalf("step %d %s: got %+v, want duplicate of %s", step, what, res, h)
				}
				break
			}
			if res.Duplicate {
				t.Fatalf("step %d %s: unexpected duplicate of %s", step, what, res.ID)
			}
			j := &modelJob{id: id, prio: *o.Priority, dedup: o.DedupKey, state: StatePending}
			if o.RunAt.IsZero() {
				j.rank = m.nextRank()
			} else {
				j.state, j.runAt = StateScheduled, o.RunAt
			}
			if o.DedupKey != "" {
				m.holder[o.DedupKey] = id
			}
			m.jobs[id] = j
		case op < 45: // claim
			what = "claim"
			c, err := f.q.Claim(ctx, "q")
			if err != nil {
				t.Fatal(err)
			}
			var best []*modelJob
			for _, j := range m.jobs {
				if j.state != StatePending {
					continue
				}
				if len(best) == 0 || j.prio > best[0].prio || j.prio == best[0].prio && j.rank < best[0].rank {
					best = []*modelJob{j}
				} else if j.prio == best[0].prio && j.rank == best[0].rank {
					best = append(best, j)
				}
			}
			if c == nil {
				if len(best) > 0 {
					t.Fatalf("step %d: claim found nothing, model has %s pending", step, best[0].id)
				}
				break
			}
			j := m.jobs[c.Job.ID]
			ok := false
			for _, b := range best {
				ok = ok || b == j
			}
			if !ok {
				t.Fatalf("step %d: claimed %s, want one of the head %v", step, c.Job.ID, best)
			}
			j.state = StateClaimed
			j.attempts++
			m.release(j)
			if c.Job.Attempts != j.attempts || c.Job.CancelRequested != j.cancelReq {
				t.Fatalf("step %d: claimed %+v, model %+v", step, c.Job, *j)
			}
			claims = append(claims, live{c, f.clock.Now()})
		case op < 70 && len(claims) > 0: // settle a claim (maybe a stale one)
			i := rng.IntN(len(claims))
			c := claims[i].c
			claims = append(claims[:i], claims[i+1:]...)
			j := m.jobs[c.Job.ID]
			current := j != nil && j.state == StateClaimed && c.Job.Attempts == j.attempts && c.q == f.q
			var err error
			kind := rng.IntN(3)
			what = fmt.Sprintf("settle(%d) %s current=%v", kind, c.Job.ID, current)
			switch kind {
			case 0:
				err = f.q.Ack(ctx, c, nil)
				if current {
					delete(m.jobs, j.id)
				}
			case 1:
				var r NackResult
				r, err = f.q.Nack(ctx, c, "n", nil)
				if current {
					switch {
					case j.cancelReq:
						if !r.Cancelled {
							t.Fatalf("step %d: nack of a cancel-requested job: %+v", step, r)
						}
						delete(m.jobs, j.id)
					case j.attempts >= maxAttempts:
						if !r.Dead {
							t.Fatalf("step %d: last nack: %+v", step, r)
						}
						j.state = StateDead
					default:
						want := f.clock.Now().Add(cfg.backoff(j.attempts))
						if r.Dead || r.Cancelled || !r.RunAt.Equal(want) {
							t.Fatalf("step %d: nack %+v, want RunAt %s", step, r, want)
						}
						j.state, j.runAt = StateScheduled, want
						m.reacquire(j)
					}
				}
			default:
				err = f.q.DeadLetter(ctx, c, "d", nil)
				if current {
					j.state = StateDead
				}
			}
			if current && err != nil {
				t.Fatalf("step %d %s: %v", step, what, err)
			}
			if !current && !errors.Is(err, ErrClaimLost) {
				t.Fatalf("step %d %s: stale settlement: %v, want ErrClaimLost", step, what, err)
			}
		case op < 76: // cancel
			j := pick(StatePending, StateScheduled, StateClaimed, StateDead)
			if j == nil {
				break
			}
			what = "cancel " + j.id
			res, err := f.q.Cancel(ctx, j.id, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := map[State]CancelResult{StatePending: CancelRemoved, StateScheduled: CancelRemoved, StateClaimed: CancelRequested, StateDead: CancelFinished}[j.state]
			if res != want {
				t.Fatalf("step %d %s (%s): %s, want %s", step, what, j.state, res, want)
			}
			switch j.state {
			case StatePending, StateScheduled:
				m.release(j)
				delete(m.jobs, j.id)
			case StateClaimed:
				j.cancelReq = true
			}
		case op < 82: // wake
			j := pick(StatePending, StateScheduled, StateClaimed)
			if j == nil {
				break
			}
			what = "wake " + j.id
			out, err := f.q.WakeScheduled(ctx, j.id, []byte("w"))
			if err != nil {
				t.Fatal(err)
			}
			want := NotScheduled
			if j.state == StateScheduled {
				want = Woken
				j.state, j.rank = StatePending, m.nextRank()
			}
			if out != want {
				t.Fatalf("step %d %s: %s, want %s", step, what, out, want)
			}
		case op < 85: // requeue dead
			j := pick(StateDead)
			if j == nil {
				break
			}
			what = "requeue " + j.id
			if err := f.q.RequeueDead(ctx, j.id); err != nil {
				t.Fatal(err)
			}
			j.state, j.attempts, j.cancelReq, j.rank = StatePending, 0, false, m.nextRank()
			m.reacquire(j)
		case op < 93: // time passes; due jobs are promoted in RunAt, ID order
			d := time.Duration(1+rng.IntN(4)) * time.Second
			what = fmt.Sprint("advance ", d)
			f.clock.Advance(d)
			if _, err := f.q.PromoteDue(ctx); err != nil {
				t.Fatal(err)
			}
			var due []*modelJob
			for _, j := range m.jobs {
				if j.state == StateScheduled && !j.runAt.After(f.clock.Now()) {
					due = append(due, j)
				}
			}
			sort.Slice(due, func(a, b int) bool {
				if !due[a].runAt.Equal(due[b].runAt) {
					return due[a].runAt.Before(due[b].runAt)
				}
				return due[a].id < due[b].id
			})
			for _, j := range due {
				j.state, j.rank = StatePending, m.nextRank()
			}
		case op < 97: // reap expired leases
			what = "reap"
			if _, err := f.q.Reap(ctx); err != nil {
				t.Fatal(err)
			}
			rank := m.nextRank()
			for _, j := range m.sorted() {
				for _, l := range claims {
					if l.c.Job.ID == j.id && j.state == StateClaimed && j.attempts == l.c.Job.Attempts && l.c.q == f.q && !l.claimed.Add(lease).After(f.clock.Now()) {
						m.requeue(j, rank, maxAttempts)
					}
				}
			}
		default: // crash after making everything durable
			what = "crash"
			f.sync()
			f.crash()
			rank := m.nextRank()
			for _, j := range m.sorted() { // recovery runs in ID order
				if j.state == StateClaimed {
					m.requeue(j, rank, maxAttempts)
				}
			}
		}
		if testing.Verbose() && what != "" {
			t.Logf("step %d: %s", step, what)
		}
		if got, want := f.stats("q"), m.stats(); got != want {
			t.Fatalf("step %d after %s: stats %+v, model %+v", step, what, got, want)
		}
	}
	for id, j := range m.jobs {
		if got := f.job(id); got.State != j.state || got.Attempts != j.attempts || got.CancelRequested != j.cancelReq {
			t.Fatalf("job %s: %+v, model %+v", id, got, *j)
		}
	}
	checkInvariants(t, f, "q")
}
