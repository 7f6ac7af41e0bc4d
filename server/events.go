package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/internal/service"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/server/wire"
)

// sseEvent is one server-sent event; id is what a client that read it
// reconnects with (Last-Event-ID): "<process epoch>-<seq>", each event's
// own. Only a resync event has none: the client resumes after the event
// before it.
type sseEvent struct {
	name string
	id   string
	data []byte
}

// replayed is one published event kept in the broker's ring: for the
// streams of every run (target "") or of one run (target its id).
type replayed struct {
	seq     uint64
	targets []string
	ev      sseEvent
}

// subscriber is one open event stream: of one run (runID set) or of
// every run's state changes.
type subscriber struct {
	runID string
	ch    chan sseEvent
	// gone is closed when the broker drops the stream (it fell behind,
	// its run ended, or the server closes).
	gone     chan struct{}
	goneOnce sync.Once
	// last is the run state this stream was last told (run streams).
	last string
	// final is the terminal state event held back until the run's last
	// step_end arrives (it is emitted once its settlement is durable,
	// which status may show first) or finalAt passes.
	final   *sseEvent
	finalAt time.Time
	// lastID is the id of the last event queued on ch (or, before any,
	// the broker's position when the stream opened, past the events
	// handed to the handler).
	lastID string
	// resync, set before the broker drops a stream that fell behind, is
	// the stream's last event: it tells the client to reconnect with
	// Last-Event-ID, from where nothing is lost.
	resync atomic.Pointer[sseEvent]
}

func (sub *subscriber) drop() { sub.goneOnce.Do(func() { close(sub.gone) }) }

// subscriberBuffer is how many events a stream may lag behind before
// the broker ends it with a resync event (a variable so tests can
// shrink it). 1024 keeps a burst of state changes (100 streams while
// 1,000 runs end) from ending streams: a resync costs the client a
// reconnection.
var subscriberBuffer = 1024

// defaultReplayRing is how many recent events the broker keeps to replay
// to a client that reconnects with Last-Event-ID.
const defaultReplayRing = 8192

// followGrace is how many heartbeats the broker goes on following every
// run after the last stream of every run closed, so a client that
// reconnects meanwhile is replayed what it missed from the ring rather
// than told to reload.
const followGrace = 60

// broker fans step events and run state changes out to event streams.
// State changes are noticed from the runs' step events and the API's own
// commands at once, and by a poll every Config.Heartbeat for changes
// other processes made (inbox commands). It reads only the writer's
// in-memory state: no object-store request, and no read on behalf of
// one client (a resumption is answered from the ring, or told to
// reload).
type broker struct {
	s       *Server
	in      *stepQueue
	touched chan string
	subsMu  sync.Mutex
	subs    map[*subscriber]struct{}
	// last is the state each run was last published in, for the streams
	// of every run: the active runs (seeded without publishing when the
	// broker starts following) and the runs that ended since, until
	// pruned with changed. A run that ended before the seed cannot
	// change, so it is not followed: memory and each poll cost the active
	// runs, not the retained ones.
	last map[string]string
	// following is set while the broker publishes every run's changes:
	// from the first stream of every run until followGrace heartbeats
	// after the last one closed (idlePolls counts them). followFrom is
	// the seq it began at: the ring holds every run change after it.
	following  bool
	followFrom uint64
	idlePolls  int
	// epoch tells this process's event ids from another's; seq numbers
	// every event sent (the loop's alone), so no two share an id.
	epoch string
	seq   uint64
	// ring holds the last ringCap events published to every stream of a
	// target, oldest first at ringHead once full; evicted is the seq of
	// the newest one it no longer holds. Events of one stream (a state,
	// a reload) are numbered but not kept.
	ring     []replayed
	ringCap  int
	ringHead int
	evicted  uint64
	// stepGap is the seq after which step events were dropped (the
	// broker fell behind the runs): a run stream resuming from before it
	// is told to reload.
	stepGap uint64
	// changed is the seq of the last published state change of each run
	// in last, to forget the oldest ended runs (prune).
	changed map[string]uint64
	// polls counts the polls done (tests wait on it).
	polls  atomic.Uint64
	subReq chan subscribeReq
	// svc runs loop from newBroker until close.
	svc *service.Loop
}

func newBroker(s *Server, ringCap int) *broker {
	b := &broker{s: s, in: newStepQueue(), touched: make(chan string, 4096),
		subs: map[*subscriber]struct{}{}, last: map[string]string{}, changed: map[string]uint64{}, subReq: make(chan subscribeReq),
		epoch: strconv.FormatInt(time.Now().UnixNano(), 36), ringCap: ringCap}
	b.svc = service.NewLoop(b.loop)
	_ = b.svc.Start(context.Background()) // a new Loop always starts
	return b
}

// maxQueuedSteps bounds the step events waiting for the broker's loop.
const maxQueuedSteps = 4096

// maxGapRuns bounds the runs a gap names; past it, every run stream is
// told.
const maxGapRuns = 1024

// stepQueue carries step events from the runtime's settling goroutines
// to the broker's loop in order, never blocking them: past
// maxQueuedSteps the events that arrive are dropped, and a gap in their
// place names their runs, so the loop tells those runs' streams.
type stepQueue struct {
	mu    sync.Mutex
	items []stepItem
	wake  chan struct{}
}

// stepItem is a step event, or (gap set) the place of dropped ones.
type stepItem struct {
	ev  interpreter.Event
	gap *stepGap
}

// stepGap names the runs whose step events were dropped (every run when
// all is set).
type stepGap struct {
	runs map[string]bool
	all  bool
}

func newStepQueue() *stepQueue { return &stepQueue{wake: make(chan struct{}, 1)} }

func (q *stepQueue) push(ev interpreter.Event) {
	q.mu.Lock()
	if len(q.items) < maxQueuedSteps {
		q.items = append(q.items, stepItem{ev: ev})
	} else {
		n := len(q.items)
		if q.items[n-1].gap == nil {
			q.items = append(q.items, stepItem{gap: &stepGap{runs: map[string]bool{}}})
			n++
		}
		g := q.items[n-1].gap
		if len(g.runs) >= maxGapRuns {
			g.all = true
		} else {
			g.runs[ev.RunID], g.runs[ownerOf(ev.RunID)] = true, true
		}
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *stepQueue) take() []stepItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// eventID is the Last-Event-ID of the event numbered seq.
func (b *broker) eventID(seq uint64) string { return b.epoch + "-" + strconv.FormatUint(seq, 10) }

// parseEventID returns the seq of a Last-Event-ID this process gave out;
// ok is false for another process's id or one that does not parse.
func (b *broker) parseEventID(id string) (seq uint64, ok bool) {
	epoch, n, found := strings.Cut(id, "-")
	if !found || epoch != b.epoch {
		return 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil || seq > b.seq {
		return 0, false
	}
	return seq, true
}

// next numbers a new event; one for targets (the streams of those runs,
// "" every run's) is kept in the ring, one for a single stream is not.
func (b *broker) next(name string, data []byte, targets ...string) sseEvent {
	b.seq++
	ev := sseEvent{name: name, id: b.eventID(b.seq), data: data}
	if len(targets) == 0 {
		return ev
	}
	if b.ringCap <= 0 {
		b.evicted = b.seq
		return ev
	}
	r := replayed{seq: b.seq, targets: targets, ev: ev}
	if len(b.ring) < b.ringCap {
		b.ring = append(b.ring, r)
	} else {
		b.evicted = b.ring[b.ringHead].seq
		b.ring[b.ringHead] = r
		b.ringHead = (b.ringHead + 1) % b.ringCap
	}
	return ev
}

// reaches reports whether the ring holds every event published after
// seq after.
func (b *broker) reaches(after uint64) bool { return after >= b.evicted }

// replay returns the ring's events for target after seq (see reaches).
func (b *broker) replay(target string, after uint64) (out []sseEvent) {
	for i := range b.ring {
		r := b.ring[(b.ringHead+i)%len(b.ring)]
		if r.seq <= after {
			continue
		}
		for _, t := range r.targets {
			if t == target {
				out = append(out, r.ev)
				break
			}
		}
	}
	return out
}

// reload is a stream's event saying it missed events nothing can replay.
func (b *broker) reload(reason string) sseEvent {
	data, _ := json.Marshal(wire.ReloadEvent{Reason: reason})
	return b.next("reload", data)
}

func (b *broker) close() { b.svc.Stop() }

// step queues a step event; past maxQueuedSteps it is dropped, and the
// streams of its run are told to reload (the poll still publishes the
// state change it implied).
func (b *broker) step(ev interpreter.Event) { b.in.push(ev) }

// touch says runID may have changed state (the API just changed it).
func (b *broker) touch(runID string) {
	select {
	case b.touched <- runID:
	default:
	}
}

// subscribeReq asks the loop to open a stream, so that what it replays
// and what it publishes next neither overlap nor leave a gap.
type subscribeReq struct {
	runID  string // "" for the stream of every run
	state  string // the run's state as the stream's first event says
	lastID string // the client's Last-Event-ID, if any
	// data is the run's summary (run streams), terminal whether it says
	// the run ended: a resuming stream holds that state back like a live
	// one (the run's last step events may still be on their way).
	data     []byte
	terminal bool
	reply    chan subscribed
}

type subscribed struct {
	sub *subscriber
	// first are the events to write before the stream's queue: what the
	// client missed since lastID, or a reload event.
	first []sseEvent
	// state is a run stream's state event, sent after first.
	state sseEvent
	// held says the run's terminal state is held back: the broker sends
	// it and ends the stream.
	held bool
}

// open registers a stream from the handler's goroutine; nil once the
// broker closed.
func (b *broker) open(runID, state, lastID string, data []byte, terminal bool) *subscribed {
	req := subscribeReq{runID: runID, state: state, lastID: lastID, data: data, terminal: terminal, reply: make(chan subscribed, 1)}
	select {
	case b.subReq <- req:
	case <-b.svc.Stopped():
		return nil
	}
	res := <-req.reply
	return &res
}

// subscribe runs in the loop: it registers the stream and computes what
// a client resuming after lastID missed, from the ring alone: a run
// stream gets the ring's step events after lastID (its handler then
// sends the current state), the stream of every run the ring's run
// events after lastID. When the ring does not reach back so far, the id
// is another process's, or (the stream of every run) the broker was not
// following every run then, the stream starts with a reload event
// instead: no store read on behalf of one client.
func (b *broker) subscribe(ctx context.Context, req subscribeReq) subscribed {
	sub := &subscriber{runID: req.runID, ch: make(chan sseEvent, subscriberBuffer), gone: make(chan struct{}), last: req.state}
	if req.runID == "" {
		b.follow(ctx)
	}
	var first []sseEvent
	if req.lastID != "" {
		after, known := b.parseEventID(req.lastID)
		switch {
		case req.runID == "" && known && after >= b.followFrom && b.reaches(after):
			first = b.replay("", after)
		case req.runID == "":
			first = []sseEvent{b.reload("the server no longer holds the run changes since Last-Event-ID (an id of another server process, or older than its ring of recent events): reload the runs (GET /v1/runs); the changes from here on follow")}
		case known && b.reaches(after) && (b.stepGap == 0 || after > b.stepGap):
			first = b.replay(req.runID, after)
		default:
			first = []sseEvent{b.reload("the server no longer holds this run's step events since Last-Event-ID: read its history (GET /v1/runs/{id}/history); the current state and the events from here on follow")}
		}
	}
	held := req.runID != "" && req.lastID != "" && req.terminal
	var state sseEvent
	if held {
		sub.final, sub.finalAt = &sseEvent{name: "state", data: req.data}, time.Now().Add(b.s.cfg.Heartbeat)
	} else if req.runID != "" {
		state = b.next("state", req.data)
	}
	sub.lastID = b.eventID(b.seq)
	b.subsMu.Lock()
	b.subs[sub] = struct{}{}
	b.subsMu.Unlock()
	return subscribed{sub: sub, first: first, state: state, held: held}
}

func (b *broker) unsubscribe(sub *subscriber) {
	b.subsMu.Lock()
	delete(b.subs, sub)
	b.subsMu.Unlock()
	sub.drop()
}

// snapshot returns the open streams.
func (b *broker) snapshot() (run map[string][]*subscriber, all []*subscriber) {
	b.subsMu.Lock()
	defer b.subsMu.Unlock()
	run = map[string][]*subscriber{}
	for sub := range b.subs {
		if sub.runID == "" {
			all = append(all, sub)
		} else {
			run[sub.runID] = append(run[sub.runID], sub)
		}
	}
	return run, all
}

// send queues ev on sub. A stream that fell behind is ended with a
// resync event naming the last event it was queued, so its client
// resumes from there (Last-Event-ID) and misses nothing.
func send(sub *subscriber, ev sseEvent) {
	select {
	case <-sub.gone:
		return
	default:
	}
	select {
	case sub.ch <- ev:
		if ev.id != "" {
			sub.lastID = ev.id
		}
	default:
		data, _ := json.Marshal(wire.ResyncEvent{Reason: fmt.Sprintf("this stream fell %d events behind", subscriberBuffer), LastEventID: sub.lastID})
		// No id of its own: the client resumes after the last event it
		// read, which the data names too.
		sub.resync.Store(&sseEvent{name: "resync", data: data})
		sub.drop()
	}
}

// loop is the broker's service: it runs until life ends, then drops
// every stream. Its reads run under their own context, so a stop waits
// for the one under way instead of cutting it off.
func (b *broker) loop(life context.Context) error {
	t := time.NewTicker(b.s.cfg.Heartbeat)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case <-life.Done():
			run, all := b.snapshot()
			for _, subs := range run {
				for _, sub := range subs {
					sub.drop()
				}
			}
			for _, sub := range all {
				sub.drop()
			}
			return nil
		case <-b.in.wake:
			for _, it := range b.in.take() {
				if it.gap != nil {
					b.publishGap(it.gap)
				} else {
					b.publishStep(ctx, it.ev)
				}
			}
		case id := <-b.touched:
			run, all := b.snapshot()
			b.check(ctx, id, run[id], all)
		case req := <-b.subReq:
			req.reply <- b.subscribe(ctx, req)
		case <-t.C:
			b.poll(ctx)
		}
	}
}

// ownerOf returns the run a step event belongs to: a child run's events
// ("parent:child") go to the parent's streams too.
func ownerOf(runID string) string {
	if i := strings.IndexByte(runID, ':'); i > 0 {
		return runID[:i]
	}
	return runID
}

func (b *broker) publishStep(ctx context.Context, ev interpreter.Event) {
	// Numbered and kept even with no stream open, so a client that
	// reconnects meanwhile is replayed what it missed.
	run, all := b.snapshot()
	name := "step_start"
	if ev.Kind != "start" {
		name = "step_end"
	}
	data, err := json.Marshal(wireStepEvent(ev))
	if err != nil {
		return
	}
	targets := []string{ev.RunID}
	if owner := ownerOf(ev.RunID); owner != ev.RunID {
		targets = append(targets, owner)
	}
	sev := b.next(name, data, targets...)
	for _, id := range targets {
		for _, sub := range run[id] {
			send(sub, sev)
			if id == ev.RunID && ev.Kind == "end" && (ev.Status == interpreter.OutcomeSucceeded || ev.Status == interpreter.OutcomeFailed) {
				sub.finalAt = time.Time{} // the run's last step: end now
			}
		}
	}
	b.check(ctx, ev.RunID, run[ev.RunID], all)
	b.endStreams(run[ev.RunID])
}

// publishGap tells the streams of runs whose step events were dropped
// to reload, and marks the place: a run stream resuming from before it
// is told so too.
func (b *broker) publishGap(g *stepGap) {
	b.stepGap = b.seq
	run, _ := b.snapshot()
	for id, subs := range run {
		if !g.all && !g.runs[id] {
			continue
		}
		for _, sub := range subs {
			send(sub, b.reload("the server fell behind and dropped step events of this run: read its history (GET /v1/runs/{id}/history); the events from here on follow"))
		}
	}
}

// endStreams sends the held-back terminal state of streams whose run
// ended and drops them: the handler drains the queued events, then
// returns.
func (b *broker) endStreams(subs []*subscriber) {
	now := time.Now()
	for _, sub := range subs {
		if sub.final != nil && !now.Before(sub.finalAt) {
			send(sub, b.next(sub.final.name, sub.final.data))
			sub.final = nil
			sub.drop()
		}
	}
}

// check reads runID's state and publishes a change to its streams and
// to the streams of every run.
func (b *broker) check(ctx context.Context, runID string, runSubs []*subscriber, all []*subscriber) {
	if len(runSubs) == 0 && len(all) == 0 && !b.following {
		return
	}
	st, err := b.s.insp.Status(ctx, runID)
	if err != nil {
		return
	}
	b.publishState(ctx, st, runSubs, all)
}

func (b *broker) publishState(ctx context.Context, st runstate.Status, runSubs []*subscriber, all []*subscriber) {
	state := st.State.String()
	var data []byte
	encode := func() []byte {
		if data == nil {
			data, _ = json.Marshal(b.s.summary(ctx, st))
		}
		return data
	}
	for _, sub := range runSubs {
		if sub.last == state {
			continue
		}
		sub.last = state
		if st.State.Terminal() {
			sub.final, sub.finalAt = &sseEvent{name: "state", data: encode()}, time.Now().Add(b.s.cfg.Heartbeat)
			continue
		}
		send(sub, b.next("state", encode()))
	}
	if b.following {
		if b.last[st.RunID] != state {
			b.last[st.RunID] = state
			ev := b.next("run", encode(), "")
			b.changed[st.RunID] = b.seq
			for _, sub := range all {
				send(sub, ev)
			}
		}
	}
}

// follow starts following every run, when a stream of every run opens:
// it records every active run's state, unpublished, and reports changes
// from then on.
func (b *broker) follow(ctx context.Context) {
	b.idlePolls = 0
	if b.following {
		return
	}
	b.following = true
	// The seed takes a seq of its own: a client resuming from before it
	// missed changes nobody recorded, and is told to reload.
	b.seq++
	b.followFrom = b.seq
	b.forEachRun(ctx, activeStates, func(st runstate.Status) {
		b.last[st.RunID] = st.State.String()
	})
}

// ended reports whether state, a published state name, is terminal.
func ended(state string) bool {
	for _, st := range stateNames {
		if st.String() == state {
			return st.Terminal()
		}
	}
	return false
}

// activeStates are the states a run can leave: every state but the
// terminal ones.
var activeStates = func() []runstate.State {
	var out []runstate.State
	for _, st := range stateNames {
		if !st.Terminal() {
			out = append(out, st)
		}
	}
	return out
}()

// maxChanged bounds the ended runs the broker remembers (about 100 bytes
// each); past it the oldest are forgotten (the ring, not this, answers
// resumptions).
const maxChanged = 32768

// prune forgets the oldest changes once more than maxChanged runs are
// remembered: their ended runs leave last.
func (b *broker) prune() {
	if len(b.changed) <= maxChanged {
		return
	}
	seqs := make([]uint64, 0, len(b.changed))
	for _, q := range b.changed {
		seqs = append(seqs, q)
	}
	slices.Sort(seqs)
	cut := seqs[len(seqs)-maxChanged/2]
	for id, q := range b.changed {
		if q >= cut {
			continue
		}
		delete(b.changed, id)
		if ended(b.last[id]) {
			delete(b.last, id)
		}
	}
}

// forEachRun calls f for every run in one of states (every run when
// states is empty), through the runtime's index.
func (b *broker) forEachRun(ctx context.Context, states []runstate.State, f func(runstate.Status)) bool {
	after := ""
	for {
		page, err := b.s.insp.ListRuns(ctx, runstate.ListOptions{After: after, Limit: listPage, States: states})
		if err != nil {
			return false
		}
		for _, st := range page {
			f(st)
		}
		if len(page) < listPage {
			return true
		}
		after = page[len(page)-1].RunID
	}
}

// poll looks for state changes no event announced: every run's for the
// streams of every run, each streamed run's for its streams.
func (b *broker) poll(ctx context.Context) {
	defer b.polls.Add(1)
	run, all := b.snapshot()
	for id, subs := range run {
		b.check(ctx, id, subs, all)
		b.endStreams(subs)
	}
	if len(all) > 0 {
		b.idlePolls = 0
	} else if b.idlePolls++; b.idlePolls > followGrace {
		// Nobody followed every run for a while: forget, and seed anew
		// on the next.
		b.last, b.changed, b.following = map[string]string{}, map[string]uint64{}, false
	}
	if !b.following {
		return
	}
	listed := map[string]bool{}
	ok := b.forEachRun(ctx, activeStates, func(st runstate.Status) {
		listed[st.RunID] = true
		b.publishState(ctx, st, nil, all)
	})
	if ok {
		// A followed run no longer active ended (or expired) without an
		// event: read it alone.
		for id, state := range b.last {
			if listed[id] || ended(state) {
				continue
			}
			got, err := b.s.insp.Status(ctx, id)
			switch {
			case err == nil:
				b.publishState(ctx, got, nil, all)
			case errors.Is(err, runtime.ErrRunNotFound):
				delete(b.last, id) // expired from the store
				delete(b.changed, id)
			}
		}
	}
	b.prune()
}

// stream writes sub's events to w until the client goes, the stream is
// dropped (its queued events are written first) or the server closes.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *subscriber, first []sseEvent) {
	defer s.events.unsubscribe(sub)
	rc := http.NewResponseController(w)
	// A stream outlives the http.Server's read and write timeouts; each
	// write has its own deadline instead.
	_ = rc.SetReadDeadline(time.Time{})
	// (A writer that cannot take deadlines, a test's recorder, streams
	// without them.)
	writeWithin := func() {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamWriteTimeout))
	}
	writeWithin()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(ev sseEvent) bool {
		writeWithin()
		var err error
		if ev.id != "" {
			_, err = fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", ev.name, ev.id, ev.data)
		} else {
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
		}
		return err == nil && rc.Flush() == nil
	}
	for _, ev := range first {
		if !write(ev) {
			return
		}
	}
	if err := rc.Flush(); err != nil {
		return
	}
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-sub.ch:
			if !write(ev) {
				return
			}
		case <-sub.gone:
			for {
				select {
				case ev := <-sub.ch:
					if !write(ev) {
						return
					}
				default:
					if rs := sub.resync.Load(); rs != nil {
						write(*rs)
					}
					return
				}
			}
		case <-t.C:
			writeWithin()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// lastEventID is the id a reconnecting client resumes after.
func lastEventID(r *http.Request) string { return strings.TrimSpace(r.Header.Get("Last-Event-ID")) }

func (s *Server) runEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	st, ok := s.status(w, r, id)
	if !ok {
		return
	}
	data, err := json.Marshal(s.summary(r.Context(), st))
	if err != nil {
		s.storeFailed(w, "encoding run "+id, err)
		return
	}
	opened := s.events.open(id, st.State.String(), lastEventID(r), data, st.State.Terminal())
	if opened == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "", "the server is shutting down")
		return
	}
	if opened.held {
		// Resuming after the run ended: what the client missed, then the
		// terminal state once the last step event is in.
		s.stream(w, r, opened.sub, opened.first)
		return
	}
	if st.State.Terminal() {
		opened.sub.drop()
	} else {
		// A change between the read above and the subscription is
		// caught at once (else by the next poll): the stream compares
		// with the state it was sent.
		s.events.touch(id)
	}
	// What a resuming client missed, then the current state.
	s.stream(w, r, opened.sub, append(opened.first, opened.state))
}

func (s *Server) allEvents(w http.ResponseWriter, r *http.Request) {
	opened := s.events.open("", "", lastEventID(r), nil, false)
	if opened == nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "", "the server is shutting down")
		return
	}
	s.stream(w, r, opened.sub, opened.first)
}
