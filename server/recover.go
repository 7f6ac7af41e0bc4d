package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/server/wire"
)

// Recovering runs: retry (redrive) and skip one run, bulk actions on a
// filter, and clearing a buffered signal. A new definition sent with a
// retry is loaded as a submission's is (loadRequested): a file of the
// workflows folder by name, or inline only with AllowInline, confined to
// the folder, refused with the shell under NoShell or with a secret the
// operator does not allow.

// maxRecoverBody bounds the body of retry, skip and bulk: a definition
// or a skip's output, like a submission's.
var maxRecoverBody = maxSubmitBody

func (s *Server) retryRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	var req wire.RetryRequest
	if r.ContentLength != 0 && !decodeBody(w, r, maxRecoverBody, &req) {
		return
	}
	opts, ok := s.redriveDefinition(w, req.Workflow, req.YAML)
	if !ok {
		return
	}
	s.redrive(w, r, id, opts)
}

func (s *Server) skipRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	var req wire.SkipRequest
	if !decodeBody(w, r, maxRecoverBody, &req) {
		return
	}
	if req.Step == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "step", "step names the step to skip: the one the run ended at or waits at")
		return
	}
	opts := interpreter.RedriveOptions{Skip: req.Step}
	if len(req.Output) > 0 {
		v, err := interpreter.DecodeJSON(req.Output)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "output", "output is not valid JSON: "+err.Error())
			return
		}
		opts.Output = v
	}
	s.redrive(w, r, id, opts)
}

// redriveDefinition loads a retry's new revision, when one is given.
func (s *Server) redriveDefinition(w http.ResponseWriter, file, yaml string) (interpreter.RedriveOptions, bool) {
	if file == "" && yaml == "" {
		return interpreter.RedriveOptions{}, true
	}
	wf, ok := s.loadRequested(w, wire.SubmitRequest{Workflow: file, YAML: yaml})
	return interpreter.RedriveOptions{Definition: wf}, ok
}

func (s *Server) redrive(w http.ResponseWriter, r *http.Request, id string, opts interpreter.RedriveOptions) {
	if _, ok := s.status(w, r, id); !ok {
		return
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	_, err := s.it.Redrive(dctx, id, opts)
	if err != nil {
		s.redriveRefused(w, id, err)
		return
	}
	s.events.touch(id)
	state := runstate.StatePending.String()
	if st, err := s.insp.Status(r.Context(), id); err == nil {
		state = st.State.String()
	}
	writeJSON(w, http.StatusAccepted, wire.RecoverResponse{RunID: id, State: state})
}

// redriveRefused answers a refused redrive (409; 422 for a definition
// the run cannot continue on) or a failure.
func (s *Server) redriveRefused(w http.ResponseWriter, id string, err error) {
	var ie *interpreter.IncompatibleError
	switch {
	case errors.As(err, &ie):
		writeJSON(w, http.StatusUnprocessableEntity, wire.Error{Error: wire.ErrorBody{Code: "incompatible_definition", Field: "/workflow", Message: err.Error()}})
	case errors.Is(err, runtime.ErrRunNotFound):
		writeError(w, http.StatusNotFound, "not_found", "id", fmt.Sprintf("no run %q", id))
	case errors.Is(err, runtime.ErrNotRedrivable):
		writeError(w, http.StatusConflict, "not_redrivable", "id", err.Error())
	default:
		s.storeFailed(w, "redriving run "+id, err)
	}
}

func (s *Server) bulk(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for _, k := range []string{"limit", "order"} {
		if q.Has(k) {
			writeError(w, http.StatusBadRequest, "bad_request", k, k+" is a listing's, not a bulk action's: a bulk action takes every run the filter selects")
			return
		}
	}
	f, ok := parseListFilter(w, q)
	if !ok {
		return
	}
	var req wire.BulkRequest
	if !decodeBody(w, r, maxRecoverBody, &req) {
		return
	}
	if req.RequestID == "" {
		req.RequestID = ulid.Make().String()
	} else if err := remote.ValidateBulkID(req.RequestID); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "request_id", err.Error())
		return
	}
	breq := remote.BulkRequest{ID: req.RequestID, DryRun: !req.Apply, Match: f.matchesExceptState,
		Filter: runstate.ListOptions{States: f.stateList(), Labels: f.indexLabels(), After: f.cursor}}
	switch req.Action {
	case "cancel":
		breq.Action = "cancel"
	case "retry":
		opts, ok := s.redriveDefinition(w, req.Workflow, req.YAML)
		if !ok {
			return
		}
		arg, err := interpreter.RedriveArg(r.Context(), s.rt.Store(), opts)
		if err != nil {
			s.storeFailed(w, "pinning the retry's definition", err)
			return
		}
		breq.Action, breq.Arg = "redrive", arg
	case "signal":
		breq.Action, breq.Payload = "signal", []byte(req.Payload)
		if len(breq.Payload) == 0 {
			breq.Payload = []byte("null")
		}
		if len(breq.Payload) > signal.MaxPayload {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", "payload", fmt.Sprintf("the signal payload is over %d bytes", signal.MaxPayload))
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "bad_request", "action", fmt.Sprintf("action %q: want cancel, retry or signal", req.Action))
		return
	}
	if req.Action != "retry" && (req.Workflow != "" || req.YAML != "") {
		writeError(w, http.StatusBadRequest, "bad_request", "workflow", "workflow and yaml are a retry's new revision; action is "+req.Action)
		return
	}
	items, err := remote.Bulk(r.Context(), s.rt, breq)
	out := wire.BulkResponse{RequestID: req.RequestID, DryRun: breq.DryRun, Runs: make([]wire.BulkRun, 0, len(items))}
	for _, it := range items {
		out.Runs = append(out.Runs, wire.BulkRun{RunID: it.RunID, Outcome: it.Outcome, Detail: it.Detail})
		if !breq.DryRun {
			s.events.touch(it.RunID)
		}
	}
	if err != nil {
		s.storeFailed(w, fmt.Sprintf("bulk %s (request %s, %d runs done; repeat it with the same request_id)", req.Action, req.RequestID, len(items)), err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) clearSignal(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := signal.CheckKey(key); err != nil {
		badSignalKey(w, err)
		return
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	ok, err := s.rt.ClearSignal(dctx, key)
	if err != nil {
		s.storeFailed(w, fmt.Sprintf("clearing signal %q", key), err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ClearSignalResponse{Key: key, Cleared: ok})
}
