package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/server/wire"
)

// maxForkBody bounds a fork request (its input mostly).
var maxForkBody = maxSubmitBody

// forkRun is POST /v1/runs/{id}/fork: a new run starting at a step of
// run id with its variables and outputs as they were just before id first
// reached it (interpreter's fork.go).
func (s *Server) forkRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	var req wire.ForkRequest
	if !decodeBody(w, r, maxForkBody, &req) {
		return
	}
	if req.At == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "at", "give at: the step the fork starts at")
		return
	}
	if _, ok := s.status(w, r, id); !ok {
		return
	}
	opts := interpreter.ForkOptions{RunID: req.RunID, Reader: s.rt.Queue()}
	if req.Workflow != "" {
		wf, ok := s.loadRequested(w, wire.SubmitRequest{Workflow: req.Workflow})
		if !ok {
			return
		}
		opts.Workflow = wf
	}
	if len(req.Input) > 0 {
		v, err := interpreter.DecodeJSON(req.Input)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "input", "input is not valid JSON: "+err.Error())
			return
		}
		opts.Input = v
	}
	recs, err := s.history(r.Context(), id, s.rt.Store())
	if err != nil {
		s.storeFailed(w, "reading the history of run "+id, err)
		return
	}
	fp, err := interpreter.FindForkPoint(r.Context(), s.rt.Store(), id, recs, req.At)
	if err != nil {
		s.forkRefused(w, id, err)
		return
	}
	spec, err := s.it.PrepareFork(r.Context(), id, fp, opts)
	if err != nil {
		s.forkRefused(w, id, err)
		return
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	sub, err := s.rt.Submit(dctx, spec)
	switch {
	case errors.Is(err, runtime.ErrInputMismatch):
		writeError(w, http.StatusConflict, "run_id_in_use", "run_id", fmt.Sprintf("run id %q is in use by another active run; pick another run_id", req.RunID))
		return
	case err != nil:
		s.storeFailed(w, "submitting the fork of run "+id, err)
		return
	}
	s.events.touch(sub.RunID)
	status := http.StatusCreated
	if !sub.NewlySubmitted {
		status = http.StatusOK
	}
	writeJSON(w, status, wire.ForkResponse{RunID: sub.RunID, New: sub.NewlySubmitted, ForkedFrom: id, At: req.At})
}

// forkRefused answers a fork that cannot be made, or a store failure.
func (s *Server) forkRefused(w http.ResponseWriter, id string, err error) {
	switch {
	case errors.Is(err, interpreter.ErrNotForkable):
		writeError(w, http.StatusUnprocessableEntity, "not_forkable", "at", err.Error())
	case errors.Is(err, dsl.ErrInputInvalid):
		writeError(w, http.StatusUnprocessableEntity, "invalid_input", inputPointer("/input", err), err.Error())
	case errors.Is(err, runstate.ErrInvalidRunID):
		writeError(w, http.StatusBadRequest, "bad_request", "run_id", err.Error())
	case errors.Is(err, interpreter.ErrRunIDReused):
		writeError(w, http.StatusConflict, "run_id_in_use", "run_id", err.Error())
	default:
		s.storeFailed(w, "forking run "+id, err)
	}
}

// diffRuns is GET /v1/runs/{id}/diff/{other}: where the two runs part
// (interpreter.DiffHistories), a fork compared with its origin from the
// start.
func (s *Server) diffRuns(w http.ResponseWriter, r *http.Request) {
	a, ok := runIDParam(w, r)
	if !ok {
		return
	}
	b := r.PathValue("other")
	if err := runstate.ValidateRunID(b); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "other", err.Error())
		return
	}
	ids := [2]string{a, b}
	var sts [2]runstate.Status
	var hist [2][]interpreter.HistoryRecord
	for i, id := range ids {
		if sts[i], ok = s.status(w, r, id); !ok {
			return
		}
		recs, err := s.history(r.Context(), id, s.rt.Store())
		if err != nil {
			s.storeFailed(w, "reading the history of run "+id, err)
			return
		}
		hist[i] = recs
	}
	hist = withForkPrefixes(r.Context(), s, ids, sts, hist)
	writeJSON(w, http.StatusOK, RunDiffOf(a, b, interpreter.DiffHistories(hist[0], hist[1])))
}

// withForkPrefixes gives a fork of the other run its origin's records
// before the fork point, so the two compare from the start.
func withForkPrefixes(ctx context.Context, s *Server, ids [2]string, sts [2]runstate.Status, hist [2][]interpreter.HistoryRecord) [2][]interpreter.HistoryRecord {
	for i := range 2 {
		o := 1 - i
		if sts[i].Headers[interpreter.HeaderForkFrom] != ids[o] {
			continue
		}
		if fp, err := interpreter.FindForkPoint(ctx, s.rt.Store(), ids[o], hist[o], sts[i].Headers[interpreter.HeaderForkAt]); err == nil {
			hist[i] = append(append([]interpreter.HistoryRecord{}, hist[o][:fp.Index]...), hist[i]...)
		}
	}
	return hist
}

// RunDiffOf is the wire form of the differences between runs a and b
// (tqw-dsl diff --json prints the same).
func RunDiffOf(a, b string, ds []interpreter.Difference) wire.RunDiff {
	out := wire.RunDiff{RunA: a, RunB: b, Differences: []wire.StepDifference{}}
	side := func(h *interpreter.HistoryRecord) *wire.DiffSide {
		if h == nil {
			return nil
		}
		s := &wire.DiffSide{Step: h.Step, Attempt: h.Attempt, Outcome: h.Outcome, Next: h.Next, Output: h.Output}
		if h.Error != nil {
			s.ErrorType = h.Error.Type
		}
		return s
	}
	for _, d := range ds {
		out.Differences = append(out.Differences, wire.StepDifference{Kind: d.Kind, Index: d.Index, Step: d.Step, A: side(d.A), B: side(d.B)})
	}
	return out
}
