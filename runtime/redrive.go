package runtime

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/archive"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// ErrNotRedrivable reports a Redrive the run does not allow: it is
// active, succeeded, its end is still being handled, or its last state
// was not kept. The error says which.
var ErrNotRedrivable = errors.New("runtime: run cannot be redriven")

// resumeRecord lives at workflow/resume/<id> from the end of a run that
// failed or was cancelled until its result goes (sealed with it): the
// input of the step a Redrive resumes at.
type resumeRecord struct {
	Nonce     string `msgpack:"n"`
	InputHash []byte `msgpack:"h"`
	Step      int    `msgpack:"s"`
	Payload   []byte `msgpack:"p,omitempty"`
	// TooLarge says the payload was over what a KV value holds: the run
	// cannot be redriven.
	TooLarge bool `msgpack:"tl,omitempty"`
}

func resumeKey(runID string) string { return kvResume + runID }

// resumeOverhead bounds a resume record's bytes besides its payload.
const resumeOverhead = 256

// keepResume adds to a terminating settlement the record a Redrive of the
// run resumes from: for a failed or cancelled run, payload (the ending
// step's input, or the runner's Fail/CancelRun payload); a succeeded run
// drops an earlier one. Nothing is kept without a result retention: no
// status would name the run to redrive.
func (rt *Runtime) keepResume(sef *queue.SettlementEffects, runID string, rec *runRecord, n int, status runstate.TerminalStatus, payload []byte) error {
	if status == runstate.Succeeded || rt.cfg.resultRetention <= 0 {
		sef.KVDeletes = append(sef.KVDeletes, resumeKey(runID))
		return nil
	}
	r := &resumeRecord{Nonce: rec.Nonce, InputHash: rec.InputHash, Step: n, Payload: payload}
	if len(payload)+resumeOverhead > queue.MaxKVValueSize {
		r.Payload, r.TooLarge = nil, true
	}
	b, err := encodeRecord(r)
	if err != nil {
		return err
	}
	sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: resumeKey(runID), Value: b})
	return nil
}

// resumeCompareDelete is the compare-delete of runID's resume record of
// incarnation nonce (nothing when it holds another's or none).
func (rt *Runtime) resumeCompareDelete(ctx context.Context, runID, nonce string) ([]queue.KVWrite, error) {
	b, err := kvGet(ctx, rt.q, resumeKey(runID))
	if err != nil || b == nil {
		return nil, err
	}
	var r resumeRecord
	if decodeRecord("resume record", b, &r) == nil && r.Nonce != nonce {
		return nil, nil
	}
	return []queue.KVWrite{{Key: resumeKey(runID), Value: b}}, nil
}

// RedriveSpec is a run a Redrive continues, as the runner's
// PrepareRedrive sees it and shapes the resumed step.
type RedriveSpec struct {
	RunID      string
	Status     runstate.TerminalStatus
	Error      string
	FinishedAt time.Time
	// Step is the runtime step the run ended at; it resumes at Step+1.
	Step int
	// Sealed says the run was read from a sealed segment: its records go
	// back into the KV with the redrive.
	Sealed bool
	// Headers are the run's user headers; PrepareRedrive may change
	// them (not under "workflow.").
	Headers map[string]string
	Labels  map[string]string
	// Payload is the state the run ended in: the input of the step that
	// ended it, or the payload the runner returned with Fail or
	// CancelRun. PrepareRedrive sets it to the resumed step's input.
	Payload []byte
	// Effects are the runner's KV writes, committed with the redrive.
	Effects *Effects
}

// Redriver is a StepRunner that can continue its runs after their end
// (Redrive): PrepareRedrive turns the state a run ended in into the
// input of the step it resumes at, with arg the caller's request (the
// runner's own encoding), or refuses with an error.
type Redriver interface {
	PrepareRedrive(ctx context.Context, r *RedriveSpec, arg []byte) error
}

// Redrive continues a run that ended Failed or Cancelled under the same
// id, from the state it ended in: PrepareRedrive of the runner (a
// Redriver) shapes the resumed step's input from it and arg. One
// durable commit makes the run active again: a fresh incarnation (its
// nonce, so the old end's notification is neither repeated nor confused
// with the new one's) with the run's submission time, input hash,
// headers and labels, its totals carried on, its step pointer at the
// ending step + 1 and that step enqueued; the result record (or, for a
// sealed run, nothing: the live copy supersedes the segment's for every
// reader), its retention and memo markers and its resume record go, and
// a sealed run's runner records come back into the KV. With record (a
// key under a ControlKVPrefix, absent so far) the commit writes it too,
// else it writes nothing and fails with ErrRecordExists.
//
// It fails with ErrRunNotFound for an unknown run, and with
// ErrNotRedrivable for an active or succeeded run, one whose
// termination notification is not handled (Redrive handles a pending one
// itself, and waits up to 10s for one running elsewhere or waiting for
// its retry: try again once it is), or one whose last
// state was not kept. With a runner that is a WaitSkipper, an active run
// is not refused at once: its waiting step is skipped (skipWaiting). Cost: memory reads, the sealed segment's index and
// data object for a sealed run, one LIST of the notification queue's
// waiting jobs per state, and one durable commit.
func (rt *Runtime) Redrive(ctx context.Context, runID string, arg []byte, record *queue.KVWrite) (SubmitOutcome, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return SubmitOutcome{}, err
	}
	rd, ok := rt.runner.(Redriver)
	if !ok {
		return SubmitOutcome{}, fmt.Errorf("%w: the step runner does not continue ended runs", ErrNotRedrivable)
	}
	if record != nil {
		if err := checkControlRecord(record.Key); err != nil {
			return SubmitOutcome{}, err
		}
		if b, err := kvGet(ctx, rt.q, record.Key); err != nil {
			return SubmitOutcome{}, err
		} else if b != nil {
			return SubmitOutcome{}, fmt.Errorf("redrive run %s: %w: %s", runID, ErrRecordExists, record.Key)
		}
	}
	if ws, ok := rd.(WaitSkipper); ok && ws.SkipsWait(arg) {
		if active, err := kvGet(ctx, rt.q, runKey(runID)); err != nil {
			return SubmitOutcome{}, err
		} else if active != nil {
			return rt.skipWaiting(ctx, runID, ws, arg, record)
		}
	}
	ended, err := rt.endedCopy(ctx, runID)
	if err != nil {
		return SubmitOutcome{}, err
	}
	if err := rt.endHandled(ctx, runID); err != nil {
		return SubmitOutcome{}, err
	}
	var res resumeRecord
	if err := decodeRecord("resume record", ended.resume, &res); err != nil {
		return SubmitOutcome{}, fmt.Errorf("run %s: %w", runID, err)
	}
	switch {
	case res.Nonce != ended.nonce:
		return SubmitOutcome{}, fmt.Errorf("%w: run %s: its last state belongs to an earlier run under the id", ErrNotRedrivable, runID)
	case res.TooLarge:
		return SubmitOutcome{}, fmt.Errorf("%w: run %s: its last state was over %d bytes and was not kept", ErrNotRedrivable, runID, queue.MaxKVValueSize)
	}
	spec := &RedriveSpec{RunID: runID, Status: ended.status, Error: ended.errMsg, FinishedAt: timeFromMs(ended.finishedMs),
		Step: res.Step, Sealed: ended.sealed, Headers: map[string]string{}, Labels: copyLabels(ended.labels),
		Payload: res.Payload, Effects: newEffects()}
	for k, v := range ended.headers {
		spec.Headers[k] = v
	}
	if err := rd.PrepareRedrive(ctx, spec, arg); err != nil {
		return SubmitOutcome{}, err
	}
	if err := validateUserHeaders(spec.Headers); err != nil {
		return SubmitOutcome{}, fmt.Errorf("redrive run %s: %w", runID, err)
	}
	nonce, jobID, next := rt.newID(), rt.newID(), res.Step+1
	headers := userHeaders(spec.Headers)
	inputHash := res.InputHash
	if len(inputHash) != sha256.Size {
		inputHash = make([]byte, sha256.Size)
	}
	rec, err := encodeRecord(&runRecord{Nonce: nonce, InputHash: inputHash, SubmittedMs: ended.submittedMs, Headers: headers, Labels: ended.labels})
	if err != nil {
		return SubmitOutcome{}, err
	}
	ptr, err := encodeRecord(&stepPointer{Nonce: nonce, Step: next, JobID: jobID})
	if err != nil {
		return SubmitOutcome{}, err
	}
	totals := &totalsRecord{}
	if len(ended.totals) > 0 {
		if err := decodeRecord("totals", ended.totals, totals); err != nil {
			return SubmitOutcome{}, fmt.Errorf("run %s: %w", runID, err)
		}
	}
	totals.Nonce = nonce // the counts go on with the new incarnation
	tb, err := encodeRecord(totals)
	if err != nil {
		return SubmitOutcome{}, err
	}
	eff := &queue.SettlementEffects{}
	eff.KVPuts = append(eff.KVPuts, queue.KVWrite{Key: runKey(runID), Value: rec}, queue.KVWrite{Key: stepKey(runID), Value: ptr},
		queue.KVWrite{Key: totalsKey(runID), Value: tb})
	eff.KVPuts = append(eff.KVPuts, labelWrites(ended.labels, runID, nonce)...)
	finished := timeFromMs(ended.finishedMs)
	eff.KVDeletes = append(eff.KVDeletes, resultKey(runID), resumeKey(runID), cancelKey(runID), timedKey(kvExpiry, finished, runID))
	eff.KVCompareDeletes = append(eff.KVCompareDeletes, queue.KVWrite{Key: timedKey(kvTerminals, finished, runID), Value: []byte(ended.nonce)})
	for _, r := range ended.records {
		if !strings.HasPrefix(r.Key, ReservedKVPrefix) {
			eff.KVPuts = append(eff.KVPuts, queue.KVWrite{Key: r.Key, Value: r.Value})
		}
	}
	puts, dels := spec.Effects.Staged()
	eff.KVPuts = append(eff.KVPuts, puts...)
	eff.KVDeletes = append(eff.KVDeletes, dels...)
	guards := append([]queue.KVWrite{{Key: runKey(runID)}}, ended.guards...)
	if record != nil {
		eff.KVPuts = append(eff.KVPuts, *record)
		guards = append(guards, queue.KVWrite{Key: record.Key})
	}
	eff.Enqueue = append(eff.Enqueue, queue.NewJob{Queue: rt.cfg.queueName, Payload: spec.Payload, Options: queue.EnqueueOptions{
		ID: jobID, DedupKey: dedupKey(runID, next), MaxAttempts: rt.cfg.maxAttempts,
		Headers: stepHeaders(headers, runID, nonce, next),
	}})
	applied, err := rt.q.ApplyEffects(ctx, eff, guards)
	if err != nil {
		return SubmitOutcome{}, fmt.Errorf("redrive run %s: %w", runID, err)
	}
	if !applied {
		if record != nil {
			if b, err := kvGet(ctx, rt.q, record.Key); err == nil && b != nil {
				return SubmitOutcome{}, fmt.Errorf("redrive run %s: %w: %s", runID, ErrRecordExists, record.Key)
			}
		}
		return SubmitOutcome{}, fmt.Errorf("%w: run %s changed while it was being redriven; look at its status and try again", ErrNotRedrivable, runID)
	}
	rt.pending.add(runID, &totalsRecord{Puts: eff.WALShare()})
	return SubmitOutcome{RunID: runID, JobID: jobID, NewlySubmitted: true}, nil
}

// endedRun is the newest copy of an ended run, as Redrive reads it.
type endedRun struct {
	nonce, errMsg           string
	status                  runstate.TerminalStatus
	submittedMs, finishedMs int64
	headers, labels         map[string]string
	totals, resume          []byte
	sealed                  bool
	records                 []archive.Record
	guards                  []queue.KVWrite
}

// endedCopy reads the newest copy of runID (the read model's rule,
// runtime/inspect), which must be an ended, redrivable one.
func (rt *Runtime) endedCopy(ctx context.Context, runID string) (*endedRun, error) {
	c, ok, err := rt.insp.kvCopy(ctx, runID)
	if err != nil {
		return nil, err
	}
	var out *endedRun
	switch {
	case ok && c.kind == copyActive:
		return nil, fmt.Errorf("%w: run %s is active; only a failed or cancelled run can be redriven", ErrNotRedrivable, runID)
	case ok:
		r, err := decodeResultRecord(c.value)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", runID, err)
		}
		out = &endedRun{nonce: r.Nonce, errMsg: r.Error, status: r.Status, submittedMs: r.SubmittedMs, finishedMs: r.FinishedMs,
			headers: r.Headers, labels: r.Labels, guards: []queue.KVWrite{{Key: resultKey(runID), Value: c.value}}}
		if t, err := kvGet(ctx, rt.q, totalsKey(runID)); err != nil {
			return nil, err
		} else if t != nil {
			var tr totalsRecord
			if decodeRecord("totals", t, &tr) == nil && tr.Nonce == r.Nonce {
				out.totals = t
			}
		}
		if out.resume, err = kvGet(ctx, rt.q, resumeKey(runID)); err != nil {
			return nil, err
		}
	default:
		e, m, err := rt.insp.sealedRun(ctx, runID)
		if err != nil {
			return nil, err
		}
		if e == nil {
			return nil, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		gen, err := kvGet(ctx, rt.q, kvSealGen)
		if err != nil {
			return nil, err
		}
		out = &endedRun{nonce: e.Nonce, errMsg: e.Error, status: runstate.TerminalStatus(e.Status), submittedMs: e.SubmittedMs,
			finishedMs: e.FinishedMs, headers: e.Headers, labels: e.Labels, totals: e.Totals, sealed: true,
			// The segment must still be there (an unchanged catalog) and
			// no result have come meanwhile.
			guards: []queue.KVWrite{{Key: resultKey(runID)}, {Key: kvSealGen, Value: gen}}}
		if out.status == runstate.Failed || out.status == runstate.Cancelled {
			data, _, err := rt.store.Get(ctx, m.DataKey())
			if err != nil {
				return nil, fmt.Errorf("runtime: read sealed segment %s: %w", m.DataKey(), err)
			}
			if out.records, err = archive.DecodeRecords(data, e); err != nil {
				return nil, fmt.Errorf("runtime: sealed segment %s: %w", m.DataKey(), err)
			}
			for _, r := range out.records {
				if r.Key == resumeKey(runID) {
					out.resume = r.Value
				}
			}
		}
	}
	switch {
	case out.status != runstate.Failed && out.status != runstate.Cancelled:
		return nil, fmt.Errorf("%w: run %s %s; only a failed or cancelled run can be redriven", ErrNotRedrivable, runID, out.status.State())
	case out.resume == nil:
		return nil, fmt.Errorf("%w: run %s: no state of its end was kept (it ended before this version kept one)", ErrNotRedrivable, runID)
	}
	return out, nil
}

// endHandled makes sure no termination notification of runID waits or
// runs: the hook must not handle the old end after the run went on. A
// pending one is handled here, as the worker would (a brief writer runs
// no notification loop), one ready notification after another; one that
// runs elsewhere or waits for its retry is waited for up to notifyWait,
// then Redrive is refused with ErrNotRedrivable.
func (rt *Runtime) endHandled(ctx context.Context, runID string) error {
	for {
		j, st, err := rt.pendingNotification(ctx, runID)
		if err != nil || j == nil {
			return err
		}
		if st == queue.StatePending {
			c, err := rt.q.Claim(ctx, rt.cfg.notifyQueue)
			if err != nil {
				return fmt.Errorf("runtime: redrive run %s: claim a notification: %w", runID, err)
			}
			if c != nil {
				rt.handleNotification(ctx, c, nil, nil)
				continue
			}
		}
		wctx, cancel := context.WithTimeout(ctx, notifyWait)
		_, err = rt.q.WaitForCompletion(wctx, j.ID)
		cancel()
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			return fmt.Errorf("%w: the end of run %s is still being handled (its notification is %s); try again once it is", ErrNotRedrivable, runID, st)
		}
	}
}

// notifyWait bounds Redrive's wait for the old end's notification.
const notifyWait = 10 * time.Second

// pendingNotification returns a termination notification of runID that
// waits or runs, and its state; nil when there is none.
func (rt *Runtime) pendingNotification(ctx context.Context, runID string) (*queue.Job, queue.State, error) {
	for _, st := range []queue.State{queue.StatePending, queue.StateScheduled, queue.StateClaimed} {
		after := ""
		for {
			page, err := rt.q.ListJobs(ctx, rt.cfg.notifyQueue, st, after, 1000)
			if err != nil {
				return nil, "", fmt.Errorf("runtime: redrive run %s: list notifications: %w", runID, err)
			}
			for i := range page {
				if page[i].Headers[headerRunID] == runID {
					return &page[i], st, nil
				}
			}
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	return nil, "", nil
}

// superseded reports whether a newer place than segment seq holds runID
// (a redrive made it live again, or sealed it again since): the
// segment's copy is not the run, and its expiry must not take what the
// newer copy still uses (memo entries, the runner's objects).
func (rt *Runtime) superseded(ctx context.Context, runID string, seq uint64) (bool, error) {
	if _, ok, err := rt.insp.kvCopy(ctx, runID); err != nil || ok {
		return ok, err
	}
	_, m, err := rt.insp.sealedRun(ctx, runID)
	if err != nil || m == nil {
		return false, err
	}
	return m.Seq > seq, nil
}
