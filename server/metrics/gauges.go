package metrics

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
)

// scrapeTimeout bounds the reads one scrape makes.
const scrapeTimeout = 5 * time.Second

// oldestScan is how many pending jobs per queue a scrape reads to find
// the one ready longest.
const oldestScan = 100

// Source is the writer state the gauges read at each scrape.
type Source struct {
	// Runtime is the writer's runtime: runs by state, its queues, its kv.
	Runtime *runtime.Runtime
	// Lease, when set, is the writer lease, for tqw_writer_lease_state.
	Lease *lease.Lease
}

// Watch registers the gauges read from src at scrape time: runs by state,
// queue depth and the age of the oldest ready job, the writer lease's
// state, and the kv's commit counters and WAL PUT latency. Call it once
// per Metrics.
func (m *Metrics) Watch(src Source) error {
	if src.Runtime == nil {
		return fmt.Errorf("metrics: Watch needs a runtime")
	}
	return m.reg.Register(&gauges{src: src})
}

var (
	runsDesc = prometheus.NewDesc("tqw_runs", "Runs in the store by state (terminal ones while their result is retained).",
		[]string{"state"}, nil)
	jobsDesc = prometheus.NewDesc("tqw_queue_jobs", "Jobs of the runtime's queues (steps, notifications) by state.",
		[]string{"queue", "state"}, nil)
	oldestDesc = prometheus.NewDesc("tqw_queue_oldest_ready_age_seconds", "How long the pending job ready longest has waited to be claimed (0: none pending), among the first 100 in claim order.",
		[]string{"queue"}, nil)
	leaseDesc = prometheus.NewDesc("tqw_writer_lease_state", "The writer lease's state: 1 for the current one (valid, suspended, lost, released).",
		[]string{"state"}, nil)
	commitsDesc = prometheus.NewDesc("tqw_kv_commits_total", "Transactions with writes committed, durable or not, since the store was opened.",
		nil, nil)
	durableDesc = prometheus.NewDesc("tqw_kv_durable_commits_total", "Commits whose WAL object is in the store, since the store was opened.",
		nil, nil)
	walPutsDesc = prometheus.NewDesc("tqw_kv_wal_puts_total", "WAL objects written (group commits), since the store was opened.",
		nil, nil)
	perPutDesc = prometheus.NewDesc("tqw_kv_commits_per_wal_put", "Durable commits per WAL PUT since the store was opened (group commit's sharing).",
		nil, nil)
	walLatencyDesc = prometheus.NewDesc("tqw_kv_wal_put_duration_seconds", "WAL PUT duration, retries included: what a durable commit waits for. Sum estimated from bucket midpoints.",
		nil, nil)
)

var leaseStates = []lease.State{lease.Valid, lease.Suspended, lease.Lost, lease.Released}

var runStates = []runstate.State{runstate.StatePending, runstate.StateRunning, runstate.StateWaiting, runstate.StateScheduled,
	runstate.StateCancelling, runstate.StateSucceeded, runstate.StateFailed, runstate.StateCancelled}

// gauges is the collector of Watch.
type gauges struct{ src Source }

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{runsDesc, jobsDesc, oldestDesc, leaseDesc, commitsDesc, durableDesc, walPutsDesc, perPutDesc, walLatencyDesc} {
		ch <- d
	}
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	rt := g.src.Runtime
	g.collectRuns(ctx, ch)
	for _, name := range []string{rt.QueueName(), rt.NotifyQueueName()} {
		g.collectQueue(ctx, ch, name)
	}
	if l := g.src.Lease; l != nil {
		cur := l.State()
		for _, s := range leaseStates {
			v := 0.0
			if s == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(leaseDesc, prometheus.GaugeValue, v, s.String())
		}
	}
	st := rt.Queue().DB().Stats()
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(st.Commits))
	ch <- prometheus.MustNewConstMetric(durableDesc, prometheus.CounterValue, float64(st.DurableCommits))
	ch <- prometheus.MustNewConstMetric(walPutsDesc, prometheus.CounterValue, float64(st.WALPuts))
	perPut := 0.0
	if st.WALPuts > 0 {
		perPut = float64(st.DurableCommits) / float64(st.WALPuts)
	}
	ch <- prometheus.MustNewConstMetric(perPutDesc, prometheus.GaugeValue, perPut)
	count, sum, buckets := histogramOf(st.FlushLatency)
	ch <- prometheus.MustNewConstHistogram(walLatencyDesc, count, sum, buckets)
}

func (g *gauges) collectRuns(ctx context.Context, ch chan<- prometheus.Metric) {
	// Sealed runs count from their segments' state counts: a scrape
	// visits the runs still in the KV only.
	counts, err := g.src.Runtime.Inspector().CountRuns(ctx, runstate.ListOptions{})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(runsDesc, fmt.Errorf("metrics: count runs: %w", err))
		return
	}
	for _, s := range runStates {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(counts[s]), s.String())
	}
}

func (g *gauges) collectQueue(ctx context.Context, ch chan<- prometheus.Metric, name string) {
	q := g.src.Runtime.Queue()
	st, err := q.Stats(ctx, name)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(jobsDesc, fmt.Errorf("metrics: stats of queue %s: %w", name, err))
		return
	}
	for state, n := range map[string]int64{"pending": st.Pending, "scheduled": st.Scheduled, "claimed": st.Claimed, "done": st.Done, "dead": st.Dead} {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), name, state)
	}
	jobs, err := q.ListJobs(ctx, name, storage.StatePending, "", oldestScan)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(oldestDesc, fmt.Errorf("metrics: pending jobs of queue %s: %w", name, err))
		return
	}
	now := q.Clock().Now()
	age := 0.0
	for _, j := range jobs {
		ready := j.EnqueuedAt
		for _, t := range []time.Time{j.RunAt, j.WokenAt} {
			if t.After(ready) {
				ready = t
			}
		}
		age = max(age, now.Sub(ready).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, name)
}

// histogramOf converts a kv latency histogram (log-scale buckets, four
// per power of two microseconds) to Prometheus buckets at each power of
// two from 128 µs to 32 s, where bucket edges coincide, so counts are
// exact; the sum is estimated from bucket midpoints (kv keeps none).
func histogramOf(h storage.Histogram) (uint64, float64, map[float64]uint64) {
	buckets := map[float64]uint64{}
	var cum uint64
	var sum float64
	next := 0
	for k := 7; k <= 25; k++ {
		// Buckets 0 .. 4k-1 hold durations below 2^k µs.
		for ; next < 4*k && next < len(h.Counts); next++ {
			n := uint64(h.Counts[next])
			cum += n
			lo, hi := math.Exp2(float64(next)/4), math.Exp2(float64(next+1)/4)
			sum += float64(n) * (lo + hi) / 2 / 1e6
		}
		buckets[math.Exp2(float64(k))/1e6] = cum
	}
	for ; next < len(h.Counts); next++ {
		n := uint64(h.Counts[next])
		lo, hi := math.Exp2(float64(next)/4), math.Exp2(float64(next+1)/4)
		sum += float64(n) * (lo + hi) / 2 / 1e6
	}
	return uint64(h.Total), sum, buckets
}
