package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/server/wire"
)

// maxSubmitBody bounds a submission: an inline workflow (the DSL's own
// file bound) plus its input.
var maxSubmitBody = int64(2*dsl.DefaultLimits.MaxFileBytes) + 64<<10

// decodeBody decodes a JSON request body into v, refusing what strictJSON
// refuses and unknown fields; a failure has been answered (400 or 413).
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "", fmt.Sprintf("the request body is over %d bytes", limit))
		return false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "", "reading the request body: "+err.Error())
		return false
	}
	var se *strictJSONError
	if err := strictJSON(b); errors.As(err, &se) {
		writeError(w, http.StatusBadRequest, "bad_request", se.topField(), "the request body: "+err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field = te.Field
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
		}
		writeError(w, http.StatusBadRequest, "bad_request", field, "the request body is not the JSON object this endpoint takes: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad_request", "", "the request body holds more than one JSON value")
		return false
	}
	return true
}

func (s *Server) submitRun(w http.ResponseWriter, r *http.Request) {
	var req wire.SubmitRequest
	if !decodeBody(w, r, maxSubmitBody, &req) {
		return
	}
	wf, ok := s.loadRequested(w, req)
	if !ok {
		return
	}
	input := any(map[string]any{})
	if len(req.Input) > 0 {
		v, err := interpreter.DecodeJSON(req.Input)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "input", "input is not valid JSON: "+err.Error())
			return
		}
		input = v
	}
	if len(req.Labels) > 0 {
		if _, ok := req.Labels[interpreter.LabelWorkflow]; ok {
			writeError(w, http.StatusBadRequest, "bad_request", "labels", fmt.Sprintf("label %q is the workflow's name, which the server sets; pick another key", interpreter.LabelWorkflow))
			return
		}
		if err := runstate.ValidateLabels(req.Labels); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "labels", err.Error())
			return
		}
	}
	out, status, ok := s.submit(w, wf, input, "/input", req.RunID, r, interpreter.WithLabels(req.Labels))
	if ok {
		writeJSON(w, status, out)
	}
}

// loadRequested loads the workflow a submission names or carries,
// answering the failure when it cannot.
func (s *Server) loadRequested(w http.ResponseWriter, req wire.SubmitRequest) (*interpreter.Workflow, bool) {
	switch {
	case req.Workflow != "" && req.YAML != "":
		writeError(w, http.StatusBadRequest, "bad_request", "yaml", "give either workflow (a file name) or yaml (inline), not both")
		return nil, false
	case req.Workflow == "" && req.YAML == "":
		writeError(w, http.StatusBadRequest, "bad_request", "workflow", "give workflow (a file of the server's workflows folder) or yaml (the workflow inline)")
		return nil, false
	}
	// A 422's field is a JSON pointer into the request body.
	var (
		wf    *interpreter.Workflow
		err   error
		field = "/yaml"
	)
	// Every file is read inside the workflows folder (none without one):
	// a workflow that arrives over HTTP calls only the operator's files.
	inFolder := interpreter.InFolder(s.cfg.WorkflowsDir)
	if req.Workflow != "" {
		field = "/workflow"
		name, ok := s.workflowPath(w, req.Workflow, "workflow")
		if !ok {
			return nil, false
		}
		wf, err = interpreter.Load(name, s.cfg.DSL, inFolder)
	} else {
		if !s.cfg.AllowInline {
			writeError(w, http.StatusForbidden, "inline_disabled", "yaml", "this server does not run workflows sent inline: submit a file of its workflows folder by name (workflow), or start serve with --allow-inline")
			return nil, false
		}
		wf, err = interpreter.LoadSource("(inline)", []byte(req.YAML), s.cfg.DSL, inFolder)
	}
	if err != nil {
		var le *interpreter.LoadError
		if errors.As(err, &le) && len(le.Diagnostics) > 0 {
			writeJSON(w, http.StatusUnprocessableEntity, wire.Error{Error: wire.ErrorBody{Code: "invalid_workflow", Field: field,
				Message: fmt.Sprintf("%s is not a valid workflow: %s", le.File, strings.TrimSpace(le.Diagnostics.Errors().String())), Diagnostics: wireDiagnostics(le.Diagnostics)}})
			return nil, false
		}
		writeError(w, http.StatusUnprocessableEntity, "invalid_workflow", field, err.Error())
		return nil, false
	}
	if s.cfg.NoShell && wf.UsesAction("shell") {
		writeError(w, http.StatusUnprocessableEntity, "invalid_workflow", field, fmt.Sprintf("%s uses the shell action, which this server refuses (--no-shell)", wf.Main.File))
		return nil, false
	}
	// Which secrets a run may read is the operator's decision, checked
	// before any value is: the answer is the same whether it is set.
	if err := s.cfg.Secrets.Check(wf); err != nil {
		writeError(w, http.StatusForbidden, "secret_not_allowed", field, err.Error())
		return nil, false
	}
	if err := wf.CheckSecrets(s.cfg.Secrets.Getenv); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "missing_secret", field, fmt.Sprintf("%s: %v (set it in the server's environment)", wf.Main.File, err))
		return nil, false
	}
	return wf, true
}

// workflowPath checks the name of a file of the workflows folder,
// answering the failure when it names none; the name is relative to the
// folder (open it with os.Root, or interpreter.InFolder). A symlink that
// leads out of the folder names none.
func (s *Server) workflowPath(w http.ResponseWriter, name, field string) (string, bool) {
	if s.cfg.WorkflowsDir == "" {
		writeError(w, http.StatusNotFound, "not_found", field, "this server has no workflows folder (--workflows); send the workflow inline as yaml")
		return "", false
	}
	if name != filepath.Base(name) || strings.HasPrefix(name, ".") || !isWorkflowFile(name) {
		writeError(w, http.StatusBadRequest, "bad_request", field, fmt.Sprintf("%q is not a workflow file name: want NAME.yaml or NAME.yml of the workflows folder, without a path", name))
		return "", false
	}
	root, err := os.OpenRoot(s.cfg.WorkflowsDir)
	if err == nil {
		defer root.Close()
		var st os.FileInfo
		if st, err = root.Stat(name); err == nil && !st.Mode().IsRegular() {
			err = dsl.ErrNotRegular
		}
	}
	if err != nil {
		writeError(w, http.StatusNotFound, "not_found", field, fmt.Sprintf("the workflows folder has no file %q; GET /v1/workflows lists them", name))
		return "", false
	}
	return name, true
}

func isWorkflowFile(name string) bool {
	ext := filepath.Ext(name)
	return (ext == ".yaml" || ext == ".yml") && !testfile.Is(name) // a test file is for tqw-dsl test
}

// submit validates input and runID and submits the run, answering a
// refusal itself (ok false). inputAt is the JSON pointer of the input in
// the request body ("/input"; "" when the body is the input).
func (s *Server) submit(w http.ResponseWriter, wf *interpreter.Workflow, input any, inputAt, runID string, r *http.Request, opts ...interpreter.SubmitOption) (wire.SubmitResponse, int, bool) {
	if err := wf.ValidateInput(input); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "invalid_input", inputPointer(inputAt, err), fmt.Sprintf("input of %s: %v", wf.Main.File, err))
		return wire.SubmitResponse{}, 0, false
	}
	if runID != "" {
		if err := runstate.ValidateRunID(runID); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "run_id", err.Error())
			return wire.SubmitResponse{}, 0, false
		}
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	sub, err := s.it.Submit(dctx, wf, input, runID, opts...)
	switch {
	case errors.Is(err, runtime.ErrInputMismatch):
		writeError(w, http.StatusConflict, "run_id_in_use", "run_id", fmt.Sprintf("run id %q is in use by an active run with a different workflow or input; pick another run_id", runID))
	case errors.Is(err, interpreter.ErrRunIDReused):
		writeError(w, http.StatusConflict, "run_id_in_use", "run_id", err.Error())
	case errors.Is(err, runstate.ErrInvalidRunID):
		writeError(w, http.StatusBadRequest, "bad_request", "run_id", err.Error())
	case errors.Is(err, dsl.ErrInputInvalid):
		writeError(w, http.StatusUnprocessableEntity, "invalid_input", inputPointer(inputAt, err), err.Error())
	case errors.Is(err, runstate.ErrInvalidLabel):
		// The workflow's labels: evaluated on this input give no label.
		writeError(w, http.StatusUnprocessableEntity, "invalid_labels", "/labels", err.Error())
	case err != nil:
		s.storeFailed(w, "submitting the run", err)
	default:
		s.events.touch(sub.RunID)
		status := http.StatusCreated
		if !sub.NewlySubmitted {
			status = http.StatusOK
		}
		return wire.SubmitResponse{RunID: sub.RunID, New: sub.NewlySubmitted}, status, true
	}
	return wire.SubmitResponse{}, 0, false
}

// inputPointer is the JSON pointer of the part of the input an input
// validation error is about, under inputAt.
func inputPointer(inputAt string, err error) string {
	p, _ := dsl.InstancePointer(err)
	return inputAt + p
}

// runID reads and checks the {id} of the path, answering a bad one.
func runIDParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := runstate.ValidateRunID(id); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "id", err.Error())
		return "", false
	}
	return id, true
}

// status reads a run's status, answering not_found or a store failure.
func (s *Server) status(w http.ResponseWriter, r *http.Request, id string) (runstate.Status, bool) {
	st, err := s.insp.Status(r.Context(), id)
	if errors.Is(err, runtime.ErrRunNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "id", fmt.Sprintf("no run %q (a finished run is kept for the server's retention)", id))
		return st, false
	}
	if err != nil {
		s.storeFailed(w, "reading run "+id, err)
		return st, false
	}
	return st, true
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	st, ok := s.status(w, r, id)
	if !ok {
		return
	}
	run, err := s.runDetail(r, st)
	if err != nil {
		s.storeFailed(w, "reading run "+id, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// runDetail reads what GET /v1/runs/{id} reports of st beyond the
// summary. The history is read last: interpreter.History returns once
// every commit read here is durable (the wait record included), so the
// answer is never ahead of the store; the step job and the definition are
// objects that never change under an id a durable status gave.
func (s *Server) runDetail(r *http.Request, st runstate.Status) (wire.Run, error) {
	ctx := r.Context()
	run := wire.Run{RunSummary: s.summary(r.Context(), st), DefinitionHash: st.Headers[interpreter.HeaderDefinition], ResultOmitted: st.ResultOmitted,
		Totals: TotalsOf(st, s.rt.Clock().Now()), VisitedSteps: []string{}}
	if json.Valid(st.Result) {
		run.Result = st.Result
	}
	if st.JobID != "" {
		if pos, err := s.it.Position(ctx, s.rt.Queue(), st.JobID); err == nil {
			if b, err := json.Marshal(pos.Input); err == nil {
				run.Input = b
			}
			if run.DefinitionHash == "" {
				run.DefinitionHash = pos.Definition
			}
			if m := pos.Map; m != nil {
				run.MapProgress = &wire.MapProgress{Step: pos.Step, Done: m.Done, Failed: m.Failed, Total: m.Total}
			}
			run.Branches = s.branches(ctx, pos)
		}
	}
	// A wait on the interpreter's own key (a call's child, a parallel or
	// map step's branches) asks nobody for a signal.
	if st.State == runstate.StateWaiting && st.SignalKey != "" && !s.it.InternalKey(st.SignalKey) {
		ws, err := s.it.Waiting(ctx, s.rt.Queue(), st.SignalKey)
		if err == nil && ws != nil && ws.RunID == st.RunID {
			// The form the UI draws keeps the order the file declares.
			schema := ws.Schema
			if schema != nil {
				schema = ws.Workflow.OrderSchema(ws.Step, "schema", schema)
			}
			run.Waiting = &wire.Waiting{SignalKey: st.SignalKey, Step: ws.Step.ID, Schema: schema}
		} else {
			run.Waiting = &wire.Waiting{SignalKey: st.SignalKey}
		}
		if run.Waiting.Step != "" {
			run.CurrentStep = &run.Waiting.Step
		}
	}
	if run.DefinitionHash != "" {
		wf, err := s.it.Definition(ctx, run.DefinitionHash)
		if errors.Is(err, interpreter.ErrDamagedObject) || errors.Is(err, interpreter.ErrDefinitionMissing) {
			return run, err // say so, not a run with empty fields
		}
		if err == nil {
			var b strings.Builder
			if wf.WriteMermaid(&b) == nil {
				run.Mermaid = b.String()
			}
		}
	}
	// Last, for its read barrier (see above).
	recs, err := s.history(ctx, st.RunID, nil)
	if err != nil {
		return run, err
	}
	seen := map[string]bool{}
	for _, h := range recs {
		if !seen[h.Step] {
			seen[h.Step] = true
			run.VisitedSteps = append(run.VisitedSteps, h.Step)
		}
	}
	return run, nil
}

// history reads runID's history, durable records only (interpreter.History
// waits for them), sealed runs' from their segments; store reads large
// outputs back (nil: they stay references).
func (s *Server) history(ctx context.Context, runID string, store objstore.Store) ([]interpreter.HistoryRecord, error) {
	return interpreter.History(ctx, interpreter.WithSealed(s.rt.Queue(), s.rt.Inspector()), store, runID)
}

// summary is st as a wire.RunSummary; the current step of an active run is
// read from its step job (no object-store request on the writer).
func (s *Server) summary(ctx context.Context, st runstate.Status) wire.RunSummary {
	sum := wire.RunSummary{RunID: st.RunID, Workflow: st.Headers[interpreter.HeaderWorkflow], State: st.State.String(),
		StartedAt: st.SubmittedAt.UTC(), SignalKey: st.SignalKey, StepNumber: st.Step, Attempt: st.Attempt, LastError: st.LastError, Labels: st.Labels}
	if st.Error != "" {
		e := st.Error
		sum.Error = &e
	}
	sum.ForkedFrom = ForkOriginOf(st)
	if !st.Until.IsZero() && !st.State.Terminal() {
		u := st.Until.UTC()
		sum.Until = &u
	}
	if !st.FinishedAt.IsZero() {
		f := st.FinishedAt.UTC()
		sum.EndedAt = &f
	}
	if st.JobID != "" && !st.State.Terminal() {
		if pos, err := s.it.Position(ctx, s.rt.Queue(), st.JobID); err == nil && pos.Step != "" {
			sum.CurrentStep = &pos.Step
		}
	}
	return sum
}

// branches reads the child run of each branch of the parallel step pos
// is at, in file order; nil at any other step. A branch whose run is not
// there yet (the step is submitting them) is pending.
func (s *Server) branches(ctx context.Context, pos interpreter.Position) []wire.Branch {
	if pos.Branches == nil {
		return nil
	}
	wf, err := s.it.Definition(ctx, pos.Definition)
	if err != nil {
		return nil
	}
	step := wf.Step(pos.Step)
	if step == nil || step.Parallel == nil {
		return nil
	}
	out := make([]wire.Branch, 0, len(step.Parallel.Branches))
	for _, br := range step.Parallel.Branches {
		b := wire.Branch{Step: pos.Step, Branch: br.Name, RunID: pos.Branches[br.Name], State: runstate.StatePending.String()}
		if st, err := s.rt.Status(ctx, b.RunID); err == nil {
			b.State = st.State.String()
			if st.JobID != "" && !st.State.Terminal() {
				if p, err := s.it.Position(ctx, s.rt.Queue(), st.JobID); err == nil {
					b.CurrentStep = p.Step
				}
			}
		}
		out = append(out, b)
	}
	return out
}

// listPage is how many runs one ListRuns call reads while filtering.
const listPage = 256

// maxListLimit bounds ?limit.
const maxListLimit = 1000

// countCap bounds the runs GET /v1/runs visits to count them when a
// workflow, label or time filter rules out the catalog's counts: past
// it the counts are lower bounds (counts_capped).
var countCap = 1000

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, ok := parseListFilter(w, q)
	if !ok {
		return
	}
	ctx := r.Context()
	out := wire.RunList{Runs: []wire.RunSummary{}}
	// The index selects by state, label and cursor; only the time filters
	// are applied here, and paging stops once a run past the page is seen.
	opts := runstate.ListOptions{After: f.cursor, Limit: min(f.limit+1, listPage), States: f.stateList(), Labels: f.indexLabels(), Descending: f.desc}
	var page []runstate.Status
	more := false
	for !more {
		var err error
		if page, err = s.insp.ListRuns(ctx, opts); err != nil {
			s.storeFailed(w, "listing runs", err)
			return
		}
		for _, st := range page {
			if !f.matchesExceptState(st) {
				continue
			}
			if len(out.Runs) == f.limit {
				more = true
				break
			}
			out.Runs = append(out.Runs, s.summary(ctx, st))
		}
		if len(page) < opts.Limit {
			break
		}
		opts.After, opts.Limit = page[len(page)-1].RunID, listPage
	}
	if more {
		last := out.Runs[len(out.Runs)-1].RunID
		out.NextCursor = &last
	}
	counts, capped, err := s.countRuns(ctx, f)
	if err != nil {
		s.storeFailed(w, "counting runs", err)
		return
	}
	out.Counts, out.CountsCapped = counts, capped
	writeJSON(w, http.StatusOK, out)
}

// countRuns counts by state the runs f selects, ignoring its states and
// cursor. Unfiltered, the runtime counts them exactly without visiting
// sealed runs; the catalog holds no per-label or per-time counts, so
// with a workflow, label or time filter the first countCap runs the
// index gives are counted and capped says the counts are lower bounds.
func (s *Server) countRuns(ctx context.Context, f listFilter) (map[string]int, bool, error) {
	out := map[string]int{}
	for _, st := range stateNames {
		out[st.String()] = 0
	}
	if f.workflow == "" && len(f.labels) == 0 && f.startedAfter.IsZero() && f.startedBefore.IsZero() {
		counts, err := s.insp.CountRuns(ctx, runstate.ListOptions{})
		if err != nil {
			return nil, false, err
		}
		for st, n := range counts {
			out[st.String()] = n
		}
		return out, false, nil
	}
	// The bound is on the runs visited, so a time filter that matches
	// few of the runs the index gives costs no more.
	opts := runstate.ListOptions{Limit: listPage, Labels: f.indexLabels()}
	visited := 0
	for {
		page, err := s.insp.ListRuns(ctx, opts)
		if err != nil {
			return nil, false, err
		}
		for _, st := range page {
			if visited == countCap {
				return out, true, nil
			}
			visited++
			if f.matchesExceptState(st) {
				out[st.State.String()]++
			}
		}
		if len(page) < listPage {
			return out, false, nil
		}
		opts.After = page[len(page)-1].RunID
	}
}

var stateNames = []runstate.State{
	runstate.StatePending, runstate.StateRunning, runstate.StateWaiting, runstate.StateScheduled, runstate.StateCancelling,
	runstate.StateSucceeded, runstate.StateFailed, runstate.StateCancelled,
}

// listFilter is GET /v1/runs's query.
type listFilter struct {
	states                      map[runstate.State]bool
	workflow                    string
	startedAfter, startedBefore time.Time
	cursor                      string
	limit                       int
	// desc lists from the greatest run id down (order=desc): newest
	// first for ULIDs; the cursor is then the id the next page is below.
	desc bool
	// labels the runs must carry every one of (label=k=v, repeatable),
	// found through the index of one of them.
	labels map[string]string
}

func (f listFilter) matchesExceptState(st runstate.Status) bool {
	if f.workflow != "" && st.Headers[interpreter.HeaderWorkflow] != f.workflow {
		return false
	}
	for k, v := range f.labels {
		if st.Labels[k] != v {
			return false
		}
	}
	if !f.startedAfter.IsZero() && !st.SubmittedAt.After(f.startedAfter) {
		return false
	}
	if !f.startedBefore.IsZero() && !st.SubmittedAt.Before(f.startedBefore) {
		return false
	}
	return true
}

// stateList is f's states in stateNames order (nil: every state).
func (f listFilter) stateList() []runstate.State {
	var out []runstate.State
	for _, st := range stateNames {
		if f.states[st] {
			out = append(out, st)
		}
	}
	return out
}

// indexLabels are the labels ListRuns selects by: f's labels and the
// workflow label every run the interpreter submits carries.
func (f listFilter) indexLabels() map[string]string {
	if f.workflow == "" {
		return f.labels
	}
	out := maps.Clone(f.labels)
	if out == nil {
		out = map[string]string{}
	}
	out[interpreter.LabelWorkflow] = f.workflow
	return out
}

func parseListFilter(w http.ResponseWriter, q map[string][]string) (listFilter, bool) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := listFilter{workflow: get("workflow"), cursor: get("cursor"), limit: 100}
	if v := get("status"); v != "" {
		f.states = map[runstate.State]bool{}
		for _, name := range strings.Split(v, ",") {
			st, ok := parseState(strings.TrimSpace(name))
			if !ok {
				writeError(w, http.StatusBadRequest, "bad_request", "status", fmt.Sprintf("status %q: want one or more of %s, separated by commas", name, stateList()))
				return f, false
			}
			f.states[st] = true
		}
	}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"started_after", &f.startedAfter}, {"started_before", &f.startedBefore}} {
		if v := get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, "bad_request", p.name, fmt.Sprintf("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", p.name, v))
				return f, false
			}
			*p.t = t
		}
	}
	for _, kv := range q["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			writeError(w, http.StatusBadRequest, "bad_request", "label", fmt.Sprintf("label %q: want key=value", kv))
			return f, false
		}
		if f.labels == nil {
			f.labels = map[string]string{}
		}
		if old, dup := f.labels[k]; dup && old != v {
			writeError(w, http.StatusBadRequest, "bad_request", "label", fmt.Sprintf("label %q is given twice with different values; a run carries one value per key", k))
			return f, false
		}
		f.labels[k] = v
	}
	if err := runstate.ValidateLabels(f.labels); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "label", err.Error())
		return f, false
	}
	switch v := get("order"); v {
	case "", "asc":
	case "desc":
		f.desc = true
	default:
		writeError(w, http.StatusBadRequest, "bad_request", "order", fmt.Sprintf("order %q: want asc (by run id) or desc (newest first)", v))
		return f, false
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			writeError(w, http.StatusBadRequest, "bad_request", "limit", fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, maxListLimit))
			return f, false
		}
		f.limit = n
	}
	if f.cursor != "" {
		if err := runstate.ValidateRunID(f.cursor); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "cursor", "cursor is not one this server gave out: "+err.Error())
			return f, false
		}
	}
	return f, true
}

func parseState(name string) (runstate.State, bool) {
	for _, st := range stateNames {
		if st.String() == name {
			return st, true
		}
	}
	return 0, false
}

func stateList() string {
	var names []string
	for _, st := range stateNames {
		names = append(names, st.String())
	}
	return strings.Join(names, ", ")
}

func (s *Server) runHistory(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	if _, ok := s.status(w, r, id); !ok {
		return
	}
	recs, err := s.history(r.Context(), id, s.rt.Store())
	if err != nil {
		s.storeFailed(w, "reading the history of run "+id, err)
		return
	}
	out := wire.History{Records: make([]wire.HistoryRecord, 0, len(recs))}
	for _, h := range recs {
		rec := wire.HistoryRecord{Step: h.Step, Kind: h.Kind, Attempt: h.Attempt, StartedAt: h.StartTime().UTC(), EndedAt: h.EndTime().UTC(),
			Status: h.Outcome, Output: h.Output, Error: wireErrorInfo(h.Error), Next: h.Next, WaitKey: h.WaitKey, Rejected: wireRejectedSignal(h.Rejected),
			DroppedVisits: h.DroppedVisits}
		if u := h.Reused; u != nil {
			rec.Reused = &wire.AnswerReuse{Calls: u.Calls, Tokens: u.Tokens, CostUSD: u.CostUSD}
		}
		if h.Until > 0 {
			u := time.UnixMilli(h.Until).UTC()
			rec.Until = &u
		}
		out.Records = append(out.Records, rec)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request) {
	id, ok := runIDParam(w, r)
	if !ok {
		return
	}
	st, ok := s.status(w, r, id)
	if !ok {
		return
	}
	if st.State.Terminal() {
		writeError(w, http.StatusConflict, "already_ended", "id", fmt.Sprintf("run %s already ended: %s", id, st.State))
		return
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	done, err := s.rt.Cancel(dctx, id)
	if errors.Is(err, runtime.ErrRunNotFound) {
		done, err = false, nil
	}
	if err != nil {
		s.storeFailed(w, "cancelling run "+id, err)
		return
	}
	if !done {
		writeError(w, http.StatusConflict, "already_ended", "id", fmt.Sprintf("run %s ended before it could be cancelled", id))
		return
	}
	s.events.touch(id)
	state := runstate.StateCancelling.String()
	if st, err := s.insp.Status(r.Context(), id); err == nil {
		state = st.State.String()
	}
	writeJSON(w, http.StatusAccepted, wire.CancelResponse{RunID: id, State: state})
}
