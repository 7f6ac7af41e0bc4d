package wire

import (
	"encoding/json"
	"time"
)

// Error is the body of every error response (schema Error).
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is what an error response reports.
type ErrorBody struct {
	// Code is the machine-readable reason (bad_request, not_found, ...).
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is where the request is at fault: a JSON pointer into the body
	// on a 422, else the request field, parameter or header.
	Field string `json:"field,omitempty"`
	// Diagnostics are a workflow's problems (code invalid_workflow).
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
}

// Health is the answer of GET /healthz and /readyz.
type Health struct {
	OK bool `json:"ok"`
	// Reason says why the server is not ready (/readyz's 503).
	Reason string `json:"reason,omitempty"`
}

// SubmitRequest is the body of POST /v1/runs: exactly one of Workflow and
// YAML.
type SubmitRequest struct {
	// Workflow names a file of the server's workflows folder.
	Workflow string `json:"workflow,omitempty"`
	// YAML is a workflow given inline.
	YAML string `json:"yaml,omitempty"`
	// Input is the run's input (default {}).
	Input json.RawMessage `json:"input,omitempty"`
	// RunID names the run (default a new ULID); submitting the same id
	// and input again is answered new=false.
	RunID string `json:"run_id,omitempty"`
	// Labels tag the run, to list it by (GET /v1/runs?label=k=v); the
	// key "workflow" is the workflow's name, set by the server.
	Labels map[string]string `json:"labels,omitempty"`
}

// SubmitResponse is the answer of POST /v1/runs; New is false when the
// same run id and input existed already (nothing was written).
type SubmitResponse struct {
	RunID string `json:"run_id"`
	New   bool   `json:"new"`
}

// RunSummary is a run as GET /v1/runs lists it and the event streams
// report it.
type RunSummary struct {
	RunID string `json:"run_id"`
	// Workflow is the workflow's declared name (its name: field).
	Workflow string `json:"workflow"`
	// State is one of pending, running, waiting, scheduled, cancelling,
	// succeeded, failed, cancelled.
	State       string     `json:"state"`
	StartedAt   time.Time  `json:"started_at"`
	EndedAt     *time.Time `json:"ended_at"`
	CurrentStep *string    `json:"current_step"`
	// SignalKey is the key a waiting run waits on.
	SignalKey string `json:"signal_key,omitempty"`
	// StepNumber is the runtime step (as status --json's step_number),
	// Attempt the deliveries of the current step so far.
	StepNumber int `json:"step_number"`
	Attempt    int `json:"attempt,omitempty"`
	// Until is when a waiting or scheduled step resumes at the latest.
	Until *time.Time `json:"until,omitempty"`
	// LastError is the current step's last error (a retry in progress);
	// Error the error a run failed with.
	LastError string  `json:"last_error,omitempty"`
	Error     *string `json:"error"`
	// Labels are the run's labels, its workflow's name (key workflow)
	// among them.
	Labels map[string]string `json:"labels,omitempty"`
	// ForkedFrom is the run this one was forked from and the step it
	// started at; absent for a run that is not a fork.
	ForkedFrom *ForkOrigin `json:"forked_from,omitempty"`
}

// ForkOrigin is a fork's lineage: the run it was forked from, and the
// step it started at.
type ForkOrigin struct {
	RunID string `json:"run_id"`
	At    string `json:"at"`
}

// Run is one run's detail: GET /v1/runs/{id}.
type Run struct {
	RunSummary
	// DefinitionHash is the content hash of the pinned definition.
	DefinitionHash string `json:"definition_hash"`
	// Input is the run's input while the run is active; absent (nil) once
	// it ended: the store no longer keeps it.
	Input json.RawMessage `json:"input,omitempty"`
	// Result is a succeeded run's result, else null.
	Result json.RawMessage `json:"result"`
	// ResultOmitted says the result was too large to report here; the
	// history holds it.
	ResultOmitted bool     `json:"result_omitted,omitempty"`
	Totals        Totals   `json:"totals"`
	Waiting       *Waiting `json:"waiting"`
	VisitedSteps  []string `json:"visited_steps"`
	// Mermaid is the step graph of the pinned definition, when known.
	Mermaid string `json:"mermaid,omitempty"`
	// MapProgress is the progress of the map step the run is at.
	MapProgress *MapProgress `json:"map_progress,omitempty"`
}

// MapProgress counts a running map step's items: Done succeeded, Failed
// failed, of Total.
type MapProgress struct {
	Step   string `json:"step"`
	Done   int    `json:"done"`
	Failed int    `json:"failed"`
	Total  int    `json:"total"`
}

// Waiting is the wait_signal step a waiting run waits in. Each object
// schema of Schema that lists properties carries "x-order": its property
// names in the order the workflow declares.
type Waiting struct {
	SignalKey string `json:"signal_key"`
	// Step is empty when the waiting step is not known.
	Step string `json:"step"`
	// Schema is the JSON Schema the signal payload must match; nil when
	// the step gives none.
	Schema any `json:"schema"`
}

// Totals is what a run cost so far, as 'tqw-dsl status --json' prints it.
type Totals struct {
	Steps    float64 `json:"steps"`
	Attempts float64 `json:"attempts"`
	Retries  float64 `json:"retries"`
	// LLMTokens and LLMCostUSD sum the llm steps' usage and cost.
	LLMTokens  float64 `json:"llm_tokens"`
	LLMCostUSD float64 `json:"llm_cost_usd"`
	// WallSeconds is from submission to the end (to now while it runs).
	WallSeconds float64 `json:"wall_seconds"`
	// Requests are the object-store requests the run caused; WAL PUTs
	// count as the run's share of each.
	Requests Requests `json:"requests"`
	// RequestsUSD prices them at S3 Standard list prices.
	RequestsUSD float64 `json:"requests_usd_at_s3_list_price"`
	// LLMSavedTokens and LLMSavedUSD are what a fork did not pay: llm
	// answers it reused, paid by the run it was forked from (or another).
	LLMSavedTokens float64 `json:"llm_saved_tokens,omitempty"`
	LLMSavedUSD    float64 `json:"llm_saved_usd,omitempty"`
}

// Requests counts object-store requests by kind.
type Requests struct {
	Put    float64 `json:"put"`
	Get    float64 `json:"get"`
	List   float64 `json:"list"`
	Delete float64 `json:"delete"`
	Head   float64 `json:"head"`
}

// RunList is the answer of GET /v1/runs: a page of runs.
type RunList struct {
	Runs []RunSummary `json:"runs"`
	// NextCursor is the cursor of the next page; nil on the last.
	NextCursor *string `json:"next_cursor"`
	// Counts are runs by state among those the workflow, label and time
	// filters select.
	Counts map[string]int `json:"counts"`
	// CountsCapped says Counts stopped at a bound (a workflow, label or
	// time filter counts at most 1000 runs): each is a lower bound.
	CountsCapped bool `json:"counts_capped"`
}

// ErrorInfo is a step's error.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Status    int    `json:"status,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
}

// RejectedSignal is a signal a waiting step set aside.
type RejectedSignal struct {
	Key string `json:"key"`
	// Size is the payload's length in bytes.
	Size   int    `json:"size"`
	Reason string `json:"reason"`
}

// HistoryRecord is one attempt of one step.
type HistoryRecord struct {
	Step string `json:"step"`
	// Kind is the action, or the step kind.
	Kind      string    `json:"kind"`
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	// Status is ok, waiting, retry, caught, failed, succeeded,
	// signal_rejected, cancelled, ...
	Status string `json:"status"`
	// Output is the step's output, secrets redacted.
	Output   any             `json:"output"`
	Error    *ErrorInfo      `json:"error"`
	Next     string          `json:"next,omitempty"`
	WaitKey  string          `json:"wait_key,omitempty"`
	Until    *time.Time      `json:"until,omitempty"`
	Rejected *RejectedSignal `json:"rejected_signal,omitempty"`
	// DroppedVisits, on the oldest record of a step, is how many earlier
	// visits of the step the history no longer holds (it keeps each
	// step's latest visits).
	DroppedVisits int `json:"dropped_visits,omitempty"`
	// Reused is what the step did not pay: answers reused by a fork.
	Reused *AnswerReuse `json:"reused,omitempty"`
}

// AnswerReuse is what a step of a fork did not pay for: calls whose
// answer another run had paid for, their tokens and cost.
type AnswerReuse struct {
	Calls   int     `json:"calls"`
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
}

// History is the answer of GET /v1/runs/{id}/history.
type History struct {
	Records []HistoryRecord `json:"records"`
}

// CancelResponse is the answer of POST /v1/runs/{id}/cancel.
type CancelResponse struct {
	RunID string `json:"run_id"`
	State string `json:"state"`
}

// SignalResponse is the answer of POST /v1/signals/{key}.
type SignalResponse struct {
	// Delivered is "now" (a step waited on the key and was woken) or
	// "buffered" (kept for the next step that waits on it).
	Delivered string `json:"delivered"`
	// Expires is when a buffered signal is dropped unless a step waits
	// on its key first; absent when delivered or kept until consumed.
	Expires *time.Time `json:"expires,omitempty"`
}

// HookResponse is the answer of POST /v1/hooks/{name}.
type HookResponse struct {
	// RunID and New report a started run (workflow hooks).
	RunID string `json:"run_id,omitempty"`
	New   bool   `json:"new,omitempty"`
	// Delivered reports a signal (signal hooks): "now" or "buffered".
	Delivered string `json:"delivered,omitempty"`
	// Duplicate is true when the delivery id was seen before: nothing
	// was done.
	Duplicate bool `json:"duplicate,omitempty"`
}

// WorkflowInfo is one file of the server's workflows folder.
type WorkflowInfo struct {
	// Name is the file's name; Workflow the workflow's declared name (its
	// name: field), as runs carry it (RunSummary.Workflow, ?workflow=),
	// absent for a file that does not load.
	Name        string `json:"name"`
	Workflow    string `json:"workflow,omitempty"`
	Description string `json:"description"`
	Steps       int    `json:"steps"`
	// Valid is false for a file that does not load; Error says why.
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
}

// WorkflowList is the answer of GET /v1/workflows.
type WorkflowList struct {
	Workflows []WorkflowInfo `json:"workflows"`
}

// WorkflowDetail is the answer of GET /v1/workflows/{name}: a workflow
// file with its graph.
type WorkflowDetail struct {
	Name    string `json:"name"`
	YAML    string `json:"yaml"`
	Mermaid string `json:"mermaid"`
	// Title is the workflow's own name (its name: field).
	Title       string `json:"title"`
	Description string `json:"description"`
}

// Diagnostic is one problem of a workflow file.
type Diagnostic struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	EndLine int    `json:"end_line"`
	EndCol  int    `json:"end_col"`
	// Severity is "error" or "warning".
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Message  string `json:"message"`
	Hint     string `json:"hint,omitempty"`
}

// ValidateReport is the answer of POST /v1/validate: one file's part of
// 'tqw-dsl validate --json'.
type ValidateReport struct {
	File        string       `json:"file"`
	Valid       bool         `json:"valid"`
	Hash        string       `json:"hash,omitempty"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// StepEvent is the data of a run stream's step_start and step_end events.
type StepEvent struct {
	Time  time.Time `json:"time"`
	RunID string    `json:"run"`
	Step  string    `json:"step"`
	// Kind is "start" or "end".
	Kind    string `json:"event"`
	Attempt int    `json:"attempt"`
	// Status, ElapsedNS, Error and Next report an end.
	Status    string     `json:"status,omitempty"`
	ElapsedNS int64      `json:"elapsed_ns,omitempty"`
	Error     *ErrorInfo `json:"error,omitempty"`
	Next      string     `json:"next,omitempty"`
	// Job is the runtime job that carried the step.
	Job string `json:"job,omitempty"`
}

// ResyncEvent is the data of a resync event, a stream's last when it fell
// behind: reconnect with Last-Event-ID set to LastEventID.
type ResyncEvent struct {
	Reason      string `json:"reason"`
	LastEventID string `json:"last_event_id"`
}

// ReloadEvent is the data of a reload event: the stream missed events the
// server cannot replay; reload the runs or the run's history.
type ReloadEvent struct {
	Reason string `json:"reason"`
}

// RetryRequest is the body of POST /v1/runs/{id}/retry (optional): a
// new revision of the run's workflow to continue on, as in
// SubmitRequest, at most one of Workflow and YAML.
type RetryRequest struct {
	Workflow string `json:"workflow,omitempty"`
	YAML     string `json:"yaml,omitempty"`
}

// SkipRequest is the body of POST /v1/runs/{id}/skip: the step the run
// failed (or waits) at, recorded as done with Output (JSON; default
// null).
type SkipRequest struct {
	Step   string          `json:"step"`
	Output json.RawMessage `json:"output,omitempty"`
}

// RecoverResponse is the answer of retry and skip: the run, active
// again, and its state.
type RecoverResponse struct {
	RunID string `json:"run_id"`
	State string `json:"state"`
}

// BulkRequest is the body of POST /v1/bulk, whose query string is the
// filter of GET /v1/runs (workflow, status, label, cursor,
// started_after, started_before; not limit nor order): Action on every
// run it selects. Without Apply it is a dry run that lists them.
type BulkRequest struct {
	// Action is "cancel", "retry" or "signal".
	Action string `json:"action"`
	// RequestID names the request: repeated with the same id, it acts on
	// no run twice (default a new id, in the answer).
	RequestID string `json:"request_id,omitempty"`
	Apply     bool   `json:"apply,omitempty"`
	// Payload is a signal's payload (default null), sent to the key each
	// selected run waits on.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Workflow or YAML: a retry's new revision, as in RetryRequest.
	Workflow string `json:"workflow,omitempty"`
	YAML     string `json:"yaml,omitempty"`
}

// BulkRun is what a bulk request did to one run.
type BulkRun struct {
	RunID string `json:"run_id"`
	// Outcome is "selected" (a dry run), "cancelled", "redriven",
	// "delivered", "buffered", "done" (by an earlier attempt of the
	// request) or "skipped" (Detail says why).
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// BulkResponse is the answer of POST /v1/bulk.
type BulkResponse struct {
	RequestID string    `json:"request_id"`
	DryRun    bool      `json:"dry_run"`
	Runs      []BulkRun `json:"runs"`
}

// ClearSignalResponse is the answer of DELETE /v1/signals/{key}.
type ClearSignalResponse struct {
	Key string `json:"key"`
	// Cleared says a buffered signal was discarded (false: none was).
	Cleared bool `json:"cleared"`
}

// RunDiff is where two runs part: GET /v1/runs/{id}/diff/{other} and
// tqw-dsl diff --json. Differences are in order, the first being where
// the runs first took a different path or produced a different output;
// empty when they did not differ.
type RunDiff struct {
	RunA        string           `json:"run_a"`
	RunB        string           `json:"run_b"`
	Differences []StepDifference `json:"differences"`
}

// StepDifference is one difference: Kind only_a or only_b (a step one run
// finished and the other did not), outcome or output (a step both
// finished, differently). Index is the step's place among the finished
// steps of run A (of run B for only_b), from 0.
type StepDifference struct {
	Kind  string    `json:"kind"`
	Index int       `json:"index"`
	Step  string    `json:"step"`
	A     *DiffSide `json:"a,omitempty"`
	B     *DiffSide `json:"b,omitempty"`
}

// DiffSide is what one run's step did.
type DiffSide struct {
	Step      string `json:"step"`
	Attempt   int    `json:"attempt"`
	Outcome   string `json:"outcome"`
	Next      string `json:"next,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
	Output    any    `json:"output,omitempty"`
}

// ForkRequest is the body of POST /v1/runs/{id}/fork.
type ForkRequest struct {
	// At is the step the fork starts at.
	At string `json:"at"`
	// Input replaces the origin's input when set.
	Input json.RawMessage `json:"input,omitempty"`
	// Workflow names a workflow file of the server's folder to run the
	// fork on instead of the origin's pinned definition.
	Workflow string `json:"workflow,omitempty"`
	// RunID names the fork; empty: a new ULID.
	RunID string `json:"run_id,omitempty"`
}

// ForkResponse answers a fork.
type ForkResponse struct {
	RunID      string `json:"run_id"`
	New        bool   `json:"new"`
	ForkedFrom string `json:"forked_from"`
	At         string `json:"at"`
}

// RunExport is GET /v1/runs/{id}/export and the body of POST /v1/import:
// the files of the folder 'tqw-dsl export' writes, by slash path, each
// as base64 (manifest.json lists the SHA-256 of every other file).
type RunExport struct {
	RunID string            `json:"run_id"`
	Files map[string][]byte `json:"files"`
}

// ImportResponse answers an import.
type ImportResponse struct {
	RunID string `json:"run_id"`
}
