package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/server/wire"
)

// The API's bodies, as package wire defines them once for the server and
// this client (their fields are documented there).
type (
	Health         = wire.Health
	SubmitRequest  = wire.SubmitRequest
	SubmitResponse = wire.SubmitResponse
	RunSummary     = wire.RunSummary
	Run            = wire.Run
	Waiting        = wire.Waiting
	Totals         = wire.Totals
	Requests       = wire.Requests
	RunList        = wire.RunList
	ErrorInfo      = wire.ErrorInfo
	RejectedSignal = wire.RejectedSignal
	HistoryRecord  = wire.HistoryRecord
	History        = wire.History
	CancelResponse = wire.CancelResponse
	SignalResponse = wire.SignalResponse
	HookResponse   = wire.HookResponse
	WorkflowInfo   = wire.WorkflowInfo
	WorkflowList   = wire.WorkflowList
	WorkflowDetail = wire.WorkflowDetail
	Diagnostic     = wire.Diagnostic
	ValidateReport = wire.ValidateReport
	StepEvent      = wire.StepEvent
	ResyncEvent    = wire.ResyncEvent
	ReloadEvent    = wire.ReloadEvent
	ForkOrigin     = wire.ForkOrigin
	AnswerReuse    = wire.AnswerReuse
	ForkRequest    = wire.ForkRequest
	ForkResponse   = wire.ForkResponse
	RunDiff        = wire.RunDiff
	StepDifference = wire.StepDifference
	DiffSide       = wire.DiffSide
)

// Client calls one server.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// Options configure New.
type Options struct {
	// Token is sent as "Authorization: Bearer <Token>" when set.
	Token string
	// HTTPClient makes the requests (default: a client without timeout;
	// bound calls with their context).
	HTTPClient *http.Client
}

// New returns a client of the server at baseURL ("http://127.0.0.1:7700").
func New(baseURL string, opts Options) *Client {
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: opts.Token, hc: hc}
}

// BaseURL returns the server's address.
func (c *Client) BaseURL() string { return c.base }

// Sentinel errors an *Error matches (errors.Is) by its HTTP status.
var (
	ErrUnauthorized = errors.New("client: unauthorized (401)")
	ErrNotFound     = errors.New("client: not found (404)")
	ErrConflict     = errors.New("client: conflict (409)")
	ErrRejected     = errors.New("client: rejected (422)")
	ErrBadRequest   = errors.New("client: bad request (400)")
	ErrUnavailable  = errors.New("client: unavailable (503)")
)

// Error is a non-2xx answer: the body the server sent with its HTTP
// status, which is not part of the body.
type Error struct {
	Status int `json:"-"`
	wire.ErrorBody
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (HTTP %d, %s, field %s)", e.Message, e.Status, e.Code, e.Field)
	}
	return fmt.Sprintf("%s (HTTP %d, %s)", e.Message, e.Status, e.Code)
}

// Is matches the sentinel of e's status.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrRejected:
		return e.Status == http.StatusUnprocessableEntity
	case ErrBadRequest:
		return e.Status == http.StatusBadRequest
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable
	}
	return false
}

// do sends a request and decodes a 2xx JSON answer into out (nil: drop).
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, ctype string, out any) (int, error) {
	resp, err := c.send(ctx, method, path, body, ctype)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("client: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, decodeError(resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *Client) send(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	return resp, nil
}

func decodeError(status int, b []byte) error {
	var env struct {
		Error *Error `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return &Error{Status: status, ErrorBody: wire.ErrorBody{Code: "http_" + strconv.Itoa(status), Message: msg}}
	}
	env.Error.Status = status
	return env.Error
}

func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return bytes.NewReader(b), nil
}

// Healthz reports whether the process is up.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, "", nil)
	return err
}

// Readyz reports whether the server holds the writer lease and reaches
// the store: nil when ready, an *Error with the reason (503) otherwise.
func (c *Client) Readyz(ctx context.Context) error {
	resp, err := c.send(ctx, http.MethodGet, "/readyz", nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h Health
	_ = json.NewDecoder(resp.Body).Decode(&h)
	if resp.StatusCode != http.StatusOK {
		return &Error{Status: resp.StatusCode, ErrorBody: wire.ErrorBody{Code: "not_ready", Message: h.Reason}}
	}
	return nil
}

// OpenAPI returns the server's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	_, err := c.do(ctx, http.MethodGet, "/v1/openapi.json", nil, "", &raw)
	return raw, err
}

// Submit submits a run.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	var out SubmitResponse
	body, err := jsonBody(req)
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/runs", body, "application/json", &out)
	return out, err
}

// Run returns a run's detail.
func (c *Client) Run(ctx context.Context, id string) (Run, error) {
	var out Run
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, "", &out)
	return out, err
}

// ListOptions filter ListRuns; zero values do not filter.
type ListOptions struct {
	// Status holds states (pending, running, waiting, scheduled,
	// cancelling, succeeded, failed, cancelled).
	Status        []string
	Workflow      string
	StartedAfter  time.Time
	StartedBefore time.Time
	Cursor        string
	Limit         int
	// Labels keeps runs carrying every one of these labels (label=k=v).
	Labels map[string]string
	// Descending lists from the greatest run id down (order=desc):
	// newest first for the ids the server gives. Keep it with Cursor.
	Descending bool
}

// ListRuns returns a page of runs, by run id (o.Descending: newest first).
func (c *Client) ListRuns(ctx context.Context, o ListOptions) (RunList, error) {
	q := o.query()
	path := "/v1/runs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out RunList
	_, err := c.do(ctx, http.MethodGet, path, nil, "", &out)
	return out, err
}

// query is o as GET /v1/runs's query string.
func (o ListOptions) query() url.Values {
	q := url.Values{}
	if len(o.Status) > 0 {
		q.Set("status", strings.Join(o.Status, ","))
	}
	if o.Workflow != "" {
		q.Set("workflow", o.Workflow)
	}
	if !o.StartedAfter.IsZero() {
		q.Set("started_after", o.StartedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !o.StartedBefore.IsZero() {
		q.Set("started_before", o.StartedBefore.UTC().Format(time.RFC3339Nano))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Descending {
		q.Set("order", "desc")
	}
	keys := make([]string, 0, len(o.Labels))
	for k := range o.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+"="+o.Labels[k])
	}
	return q
}

// History returns every attempt of every step of a run, in order.
func (c *Client) History(ctx context.Context, id string) ([]HistoryRecord, error) {
	var out History
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/history", nil, "", &out)
	return out.Records, err
}

// Cancel cancels an active run.
func (c *Client) Cancel(ctx context.Context, id string) (CancelResponse, error) {
	var out CancelResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/cancel", nil, "", &out)
	return out, err
}

// Fork starts a new run at step req.At of run id, with its variables and
// outputs as they were just before id first reached it.
func (c *Client) Fork(ctx context.Context, id string, req ForkRequest) (ForkResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return ForkResponse{}, err
	}
	var out ForkResponse
	_, err = c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(id)+"/fork", bytes.NewReader(body), "application/json", &out)
	return out, err
}

// Diff returns where runs a and b part, first difference first.
func (c *Client) Diff(ctx context.Context, a, b string) (RunDiff, error) {
	var out RunDiff
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(a)+"/diff/"+url.PathEscape(b), nil, "", &out)
	return out, err
}

// Signal sends payload (JSON; nil is null) to the step waiting on key.
func (c *Client) Signal(ctx context.Context, key string, payload []byte, requireWaiting bool) (SignalResponse, error) {
	path := "/v1/signals/" + url.PathEscape(key)
	if requireWaiting {
		path += "?require_waiting=true"
	}
	var out SignalResponse
	_, err := c.do(ctx, http.MethodPost, path, bytes.NewReader(payload), "application/json", &out)
	return out, err
}

// Workflows lists the server's workflow files.
func (c *Client) Workflows(ctx context.Context) ([]WorkflowInfo, error) {
	var out WorkflowList
	_, err := c.do(ctx, http.MethodGet, "/v1/workflows", nil, "", &out)
	return out.Workflows, err
}

// Workflow returns a workflow file of the server's folder.
func (c *Client) Workflow(ctx context.Context, name string) (WorkflowDetail, error) {
	var out WorkflowDetail
	_, err := c.do(ctx, http.MethodGet, "/v1/workflows/"+url.PathEscape(name), nil, "", &out)
	return out, err
}

// Validate validates workflow YAML; filename names it in diagnostics.
func (c *Client) Validate(ctx context.Context, filename string, src []byte) (ValidateReport, error) {
	path := "/v1/validate"
	if filename != "" {
		path += "?filename=" + url.QueryEscape(filename)
	}
	var out ValidateReport
	_, err := c.do(ctx, http.MethodPost, path, bytes.NewReader(src), "application/yaml", &out)
	return out, err
}

// Schema returns the workflow JSON Schema.
func (c *Client) Schema(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	_, err := c.do(ctx, http.MethodGet, "/v1/schema", nil, "", &raw)
	return raw, err
}

// Event is one server-sent event: Name is state, step_start, step_end
// (run streams) or run (the stream of every run), or reload (either:
// the stream missed events the server cannot replay; reload the runs or
// the run's history); Data its JSON (a RunSummary, StepEvent, ResyncEvent
// or ReloadEvent); ID its id, which a reconnecting client resumes after
// (Last-Event-ID).
type Event struct {
	Name string
	ID   string
	Data json.RawMessage
}

// Stream is an open event stream. Close it when done.
//
// The server ends a stream that falls too far behind with a resync
// event; Next then reconnects with the id of the last event read
// (Last-Event-ID), and the server resends what the stream missed, or
// starts with a reload event when it no longer can, so a slow reader
// loses nothing silently. A reconnection that fails is Next's error;
// EventsSince and RunEventsSince resume from LastEventID by hand.
type Stream struct {
	c      *Client
	ctx    context.Context
	path   string
	body   io.ReadCloser
	sc     *bufio.Scanner
	lastID string
	// Resyncs counts the reconnections a resync event caused.
	Resyncs int
}

// LastEventID is the id of the last event Next returned (or the
// position the server gave in a resync event): pass it to EventsSince
// or RunEventsSince to resume after it.
func (s *Stream) LastEventID() string { return s.lastID }

// Next returns the next event; io.EOF once the server ended the stream
// (a run stream ends after its run ended).
func (s *Stream) Next() (Event, error) {
	for {
		ev, err := s.read()
		if err != nil || ev.Name != "resync" {
			return ev, err
		}
		if err := s.reconnect(); err != nil {
			return Event{}, err
		}
	}
}

// read parses the next event off the wire.
func (s *Stream) read() (Event, error) {
	var ev Event
	var data []string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.Name != "" || len(data) > 0 {
				ev.Data = json.RawMessage(strings.Join(data, "\n"))
				if ev.ID != "" {
					s.lastID = ev.ID
				}
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			ev.Name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "id:"):
			ev.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := s.sc.Err(); err != nil {
		return Event{}, fmt.Errorf("client: reading the event stream: %w", err)
	}
	return Event{}, io.EOF
}

func (s *Stream) reconnect() error {
	_ = s.body.Close()
	ns, err := s.c.stream(s.ctx, s.path, s.lastID)
	if err != nil {
		return fmt.Errorf("client: resuming the event stream after %q: %w", s.lastID, err)
	}
	s.body, s.sc = ns.body, ns.sc
	s.Resyncs++
	return nil
}

// Close ends the stream.
func (s *Stream) Close() error { return s.body.Close() }

func (c *Client) stream(ctx context.Context, path, lastID string) (*Stream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return nil, decodeError(resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &Stream{c: c, ctx: ctx, path: path, body: resp.Body, sc: sc, lastID: lastID}, nil
}

// RunEvents opens the event stream of one run: first its current state,
// then step_start, step_end and state events until it ends.
func (c *Client) RunEvents(ctx context.Context, id string) (*Stream, error) {
	return c.RunEventsSince(ctx, id, "")
}

// RunEventsSince resumes a run's stream after the event lastID: the
// step events since (while the server still holds them), then the
// current state.
func (c *Client) RunEventsSince(ctx context.Context, id, lastID string) (*Stream, error) {
	return c.stream(ctx, "/v1/runs/"+url.PathEscape(id)+"/events", lastID)
}

// Events opens the stream of every run's state changes (event run).
func (c *Client) Events(ctx context.Context) (*Stream, error) {
	return c.EventsSince(ctx, "")
}

// EventsSince resumes the stream of every run after the event lastID:
// the server resends the changes since, or the current summary of each
// run that changed since, so no run's latest state is missed.
func (c *Client) EventsSince(ctx context.Context, lastID string) (*Stream, error) {
	return c.stream(ctx, "/v1/events", lastID)
}

// Hook posts body to the webhook name with the given extra headers (the
// signature, the delivery id), as a sender such as GitHub would.
func (c *Client) Hook(ctx context.Context, name string, body []byte, header http.Header) (HookResponse, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/hooks/"+url.PathEscape(name), bytes.NewReader(body))
	if err != nil {
		return HookResponse{}, 0, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return HookResponse{}, 0, fmt.Errorf("client: POST hook %s: %w", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return HookResponse{}, resp.StatusCode, fmt.Errorf("client: reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return HookResponse{}, resp.StatusCode, decodeError(resp.StatusCode, b)
	}
	var out HookResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return out, resp.StatusCode, fmt.Errorf("client: decoding the answer: %w", err)
	}
	return out, resp.StatusCode, nil
}
