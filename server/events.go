package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/interpreter"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data []byte
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
}

func (sub *subscriber) drop() { sub.goneOnce.Do(func() { close(sub.gone) }) }

// subscriberBuffer is how many events a stream may lag behind before
// the broker drops it (the client reconnects and reads the state anew).
const subscriberBuffer = 256

// broker fans step events and run state changes out to event streams.
// State changes are noticed from the runs' step events and the API's own
// commands at once, and by a poll every Config.Heartbeat for changes
// other processes made (inbox commands). It reads only the writer's
// in-memory state: no object-store request.
type broker struct {
	s       *Server
	in      chan interpreter.Event
	touched chan string
	seedReq chan chan struct{}
	subsMu  sync.Mutex
	subs    map[*subscriber]struct{}
	// last is the state each run was last published in, for the streams
	// of every run; seeded (without publishing) when the first opens.
	last   map[string]string
	seeded bool
	quit   chan struct{}
	once   sync.Once
	done   chan struct{}
}

func newBroker(s *Server) *broker {
	b := &broker{s: s, in: make(chan interpreter.Event, 4096), touched: make(chan string, 4096), seedReq: make(chan chan struct{}),
		subs: map[*subscriber]struct{}{}, last: map[string]string{}, quit: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

func (b *broker) close() {
	b.once.Do(func() { close(b.quit) })
	<-b.done
}

// step queues a step event; a full queue drops it (the poll still
// publishes the state change it implied).
func (b *broker) step(ev interpreter.Event) {
	select {
	case b.in <- ev:
	default:
	}
}

// touch says runID may have changed state (the API just changed it).
func (b *broker) touch(runID string) {
	select {
	case b.touched <- runID:
	default:
	}
}

func (b *broker) subscribe(runID, state string) *subscriber {
	sub := &subscriber{runID: runID, ch: make(chan sseEvent, subscriberBuffer), gone: make(chan struct{}), last: state}
	b.subsMu.Lock()
	b.subs[sub] = struct{}{}
	b.subsMu.Unlock()
	return sub
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

// send queues ev on sub, dropping a stream that fell behind.
func send(sub *subscriber, ev sseEvent) {
	select {
	case <-sub.gone:
		return
	default:
	}
	select {
	case sub.ch <- ev:
	default:
		sub.drop()
	}
}

func (b *broker) loop() {
	defer close(b.done)
	t := time.NewTicker(b.s.cfg.Heartbeat)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case <-b.quit:
			run, all := b.snapshot()
			for _, subs := range run {
				for _, sub := range subs {
					sub.drop()
				}
			}
			for _, sub := range all {
				sub.drop()
			}
			return
		case ev := <-b.in:
			b.publishStep(ctx, ev)
		case id := <-b.touched:
			run, all := b.snapshot()
			b.check(ctx, id, run[id], all)
		case done := <-b.seedReq:
			b.seed(ctx)
			close(done)
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
	run, all := b.snapshot()
	if len(run) == 0 && len(all) == 0 {
		return
	}
	name := "step_start"
	if ev.Kind != "start" {
		name = "step_end"
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	for _, id := range []string{ev.RunID, ownerOf(ev.RunID)} {
		for _, sub := range run[id] {
			send(sub, sseEvent{name: name, data: data})
			if id == ev.RunID && ev.Kind == "end" && (ev.Status == interpreter.OutcomeSucceeded || ev.Status == interpreter.OutcomeFailed) {
				sub.finalAt = time.Time{} // the run's last step: end now
			}
		}
		if id == ownerOf(ev.RunID) {
			break
		}
	}
	b.check(ctx, ev.RunID, run[ev.RunID], all)
	b.endStreams(run[ev.RunID])
}

// endStreams sends the held-back terminal state of streams whose run
// ended and drops them: the handler drains the queued events, then
// returns.
func (b *broker) endStreams(subs []*subscriber) {
	now := time.Now()
	for _, sub := range subs {
		if sub.final != nil && !now.Before(sub.finalAt) {
			send(sub, *sub.final)
			sub.final = nil
			sub.drop()
		}
	}
}

// check reads runID's state and publishes a change to its streams and
// to the streams of every run.
func (b *broker) check(ctx context.Context, runID string, runSubs []*subscriber, all []*subscriber) {
	if len(runSubs) == 0 && len(all) == 0 {
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
		ev := sseEvent{name: "state", data: encode()}
		if st.State.Terminal() {
			sub.final, sub.finalAt = &ev, time.Now().Add(b.s.cfg.Heartbeat)
			continue
		}
		send(sub, ev)
	}
	if len(all) > 0 {
		b.seed(ctx)
		if b.last[st.RunID] != state {
			b.last[st.RunID] = state
			for _, sub := range all {
				send(sub, sseEvent{name: "run", data: encode()})
			}
		}
	}
}

// seed records every run's state, unpublished, when the first stream of
// every run opens: it reports changes from then on.
func (b *broker) seed(ctx context.Context) {
	if b.seeded {
		return
	}
	b.seeded = true
	b.forEachRun(ctx, func(st runstate.Status) { b.last[st.RunID] = st.State.String() })
}

func (b *broker) forEachRun(ctx context.Context, f func(runstate.Status)) bool {
	after := ""
	for {
		page, err := b.s.insp.ListRuns(ctx, runstate.ListOptions{After: after, Limit: listPage})
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
	run, all := b.snapshot()
	for id, subs := range run {
		b.check(ctx, id, subs, nil)
		b.endStreams(subs)
	}
	if len(all) == 0 {
		// Nobody follows every run: forget, and seed anew on the next.
		b.last, b.seeded = map[string]string{}, false
		return
	}
	if !b.seeded {
		b.seed(ctx)
		return
	}
	listed := map[string]bool{}
	ok := b.forEachRun(ctx, func(st runstate.Status) {
		listed[st.RunID] = true
		b.publishState(ctx, st, nil, all)
	})
	if ok {
		for id := range b.last {
			if !listed[id] {
				delete(b.last, id) // expired from the store
			}
		}
	}
}

// stream writes sub's events to w until the client goes, the stream is
// dropped (its queued events are written first) or the server closes.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *subscriber, first []sseEvent) {
	defer s.events.unsubscribe(sub)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(ev sseEvent) bool {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data); err != nil {
			return false
		}
		return rc.Flush() == nil
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
					return
				}
			}
		case <-t.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

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
	sub := s.events.subscribe(id, st.State.String())
	if st.State.Terminal() {
		sub.drop()
	}
	// A change between the read above and the subscription is caught by
	// the next poll: the stream compares with the state it was sent.
	s.events.touch(id)
	s.stream(w, r, sub, []sseEvent{{name: "state", data: data}})
}

func (s *Server) allEvents(w http.ResponseWriter, r *http.Request) {
	sub := s.events.subscribe("", "")
	done := make(chan struct{})
	select {
	case s.events.seedReq <- done:
		<-done
	case <-s.events.quit:
	}
	s.stream(w, r, sub, nil)
}
