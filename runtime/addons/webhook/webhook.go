package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime"
)

// Names of the header that opts a run in and of the HTTP headers sent.
const (
	// CallbackURLHeader is the run header holding the callback URL.
	CallbackURLHeader = "callback_url"
	// HeaderRunID carries the run id.
	HeaderRunID = "Workflow-Run-Id"
	// HeaderRunStatus carries "succeeded", "failed" or "cancelled".
	HeaderRunStatus = "Workflow-Run-Status"
	// HeaderSignature carries "t=<unix seconds>,v1=<hex HMAC-SHA256>" when a
	// secret is configured.
	HeaderSignature = "Workflow-Signature"
)

// DefaultTimeout bounds one delivery attempt.
const DefaultTimeout = 10 * time.Second

// Options configure New. The zero value works.
type Options struct {
	// Client sends the requests; nil means a client with no timeout of its
	// own (Timeout bounds each attempt).
	Client *http.Client
	// Timeout bounds one attempt, response included; 0 means DefaultTimeout.
	Timeout time.Duration
	// Secret, when set, signs each body (see HeaderSignature).
	Secret []byte
	// Now is the clock of signature timestamps; nil means time.Now.
	Now func() time.Time
	// UserAgent is sent when set.
	UserAgent string
}

// Hook POSTs run outcomes to each run's callback URL. Safe for concurrent use.
type Hook struct {
	client  *http.Client
	timeout time.Duration
	secret  []byte
	now     func() time.Time
	ua      string
}

var _ runtime.TerminalHook = (*Hook)(nil)

// New returns a Hook configured by opts.
func New(opts Options) *Hook {
	h := &Hook{client: opts.Client, timeout: opts.Timeout, secret: append([]byte{}, opts.Secret...), now: opts.Now, ua: opts.UserAgent}
	if h.client == nil {
		h.client = &http.Client{}
	}
	if h.timeout <= 0 {
		h.timeout = DefaultTimeout
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h
}

// Observes reports whether the run carries a callback URL.
func (h *Hook) Observes(o *runstate.Outcome) bool { return o.Headers[CallbackURLHeader] != "" }

// Payload is the JSON body of a callback.
type Payload struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	// Result is the Succeed result when it is JSON; ResultBase64 when not.
	Result        json.RawMessage `json:"result,omitempty"`
	ResultBase64  string          `json:"result_base64,omitempty"`
	ResultOmitted bool            `json:"result_omitted,omitempty"`
	// Reason is the Fail or CancelRun reason, or the last step error.
	Reason      string    `json:"reason,omitempty"`
	Step        int       `json:"step"`
	SubmittedAt time.Time `json:"submitted_at"`
	FinishedAt  time.Time `json:"finished_at"`
}

// NewPayload builds the callback body of o.
func NewPayload(o *runstate.Outcome) Payload {
	p := Payload{RunID: o.RunID, Status: o.Status.String(), ResultOmitted: o.ResultOmitted, Reason: o.Error,
		Step: o.Step, SubmittedAt: o.SubmittedAt.UTC(), FinishedAt: o.FinishedAt.UTC()}
	if len(o.Result) > 0 {
		if json.Valid(o.Result) {
			p.Result = append(json.RawMessage{}, o.Result...)
		} else {
			p.ResultBase64 = base64.StdEncoding.EncodeToString(o.Result)
		}
	}
	return p
}

// Sign returns the HeaderSignature value of body at unix time t.
func Sign(secret []byte, t int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(t, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + strconv.FormatInt(t, 10) + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// OnTermination POSTs o to its callback URL and classifies the answer.
func (h *Hook) OnTermination(ctx context.Context, o *runstate.Outcome, _ *runtime.TerminalEffects) error {
	raw := o.Headers[CallbackURLHeader]
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return runtime.Permanent(fmt.Errorf("webhook: run %s: callback_url %q is not an absolute http(s) URL; fix the header of the run", o.RunID, raw))
	}
	body, err := json.Marshal(NewPayload(o))
	if err != nil {
		return runtime.Permanent(fmt.Errorf("webhook: run %s: encode payload: %w", o.RunID, err))
	}
	actx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return runtime.Permanent(fmt.Errorf("webhook: run %s: build request: %w", o.RunID, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderRunID, o.RunID)
	req.Header.Set(HeaderRunStatus, o.Status.String())
	if h.ua != "" {
		req.Header.Set("User-Agent", h.ua)
	}
	if len(h.secret) > 0 {
		req.Header.Set(HeaderSignature, Sign(h.secret, h.now().Unix(), body))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		// Timeouts, refused connections, resets: worth another try.
		return runtime.Transient(fmt.Errorf("webhook: run %s: POST %s: %w", o.RunID, u.Redacted(), err))
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	_ = resp.Body.Close()
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err = &StatusError{RunID: o.RunID, URL: u.Redacted(), Code: code, Body: string(snippet)}
	if Retryable(code) {
		return runtime.Transient(err)
	}
	return runtime.Permanent(err)
}

// Retryable reports whether a callback answered with code is retried: 408,
// 429 and 5xx.
func Retryable(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 && code <= 599
}

// StatusError is a non-2xx answer of a callback URL.
type StatusError struct {
	RunID, URL string
	Code       int
	// Body is the start of the response body.
	Body string
}

// Error describes the answer.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("webhook: run %s: POST %s answered %d", e.RunID, e.URL, e.Code)
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// AsStatusError returns the *StatusError in err's chain, if any.
func AsStatusError(err error) (*StatusError, bool) {
	var se *StatusError
	ok := errors.As(err, &se)
	return se, ok
}
