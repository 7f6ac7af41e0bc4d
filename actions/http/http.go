package http

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	nethttp "net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/actions"
)

// Name is the action's name in workflows.
const Name = "http"

// Error types specific to this action; the common ones are in package actions.
const (
	TypeResponseTooLarge = "http.response_too_large"
	TypeInvalidBody      = "http.invalid_body"
	TypeUnexpectedStatus = "http.unexpected_status"
)

// Defaults used when Options leave a field zero.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 10 << 20
)

// Options configure the action.
type Options struct {
	// Client sends the requests; nil means a client with Go's default
	// transport. Its redirect policy applies.
	Client *nethttp.Client
	// Timeout bounds an attempt when the step gives no timeout; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxResponseBytes is the default cap on a response body; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Action is the "http" action. Create it with New.
type Action struct {
	client  *nethttp.Client
	timeout time.Duration
	maxBody int64
}

// New returns the action configured by opts.
func New(opts Options) *Action {
	a := &Action{client: opts.Client, timeout: opts.Timeout, maxBody: opts.MaxResponseBytes}
	if a.client == nil {
		a.client = &nethttp.Client{}
	}
	if a.timeout <= 0 {
		a.timeout = DefaultTimeout
	}
	if a.maxBody <= 0 {
		a.maxBody = DefaultMaxResponseBytes
	}
	return a
}

// Name returns "http".
func (a *Action) Name() string { return Name }

// Args are the action's arguments, decoded with actions.DecodeArgs.
type Args struct {
	Method           string            `arg:"method"`
	URL              string            `arg:"url,required"`
	Headers          map[string]string `arg:"headers"`
	Query            map[string]string `arg:"query"`
	Body             any               `arg:"body"`
	Timeout          time.Duration     `arg:"timeout"`
	ExpectStatus     StatusList        `arg:"expect_status"`
	MaxResponseBytes *int64            `arg:"max_response_bytes"`
	Cache            Cache             `arg:"cache"`
}

// StatusList is expect_status: one status code or a list of them.
type StatusList []int

// DecodeArg accepts an integer or a list of integers, each 100..599.
func (s *StatusList) DecodeArg(v any) error {
	items, isList := v.([]any)
	if !isList {
		items = []any{v}
	}
	if len(items) == 0 {
		return errors.New("want a status code or a non-empty list of them")
	}
	out := make(StatusList, 0, len(items))
	for i, it := range items {
		field := ""
		if isList {
			field = fmt.Sprintf("[%d]", i)
		}
		n, err := actions.Int64(it)
		if err != nil || n < 100 || n > 599 {
			return &actions.ArgError{Field: field, Problem: fmt.Sprintf("want an HTTP status code (100-599), got %v", it)}
		}
		out = append(out, int(n))
	}
	*s = out
	return nil
}

var methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

// Execute sends one request and classifies the outcome.
func (a *Action) Execute(ctx context.Context, call *actions.Call) (any, error) {
	var args Args
	if err := actions.DecodeArgs(call.Args, &args); err != nil {
		return nil, err
	}
	req, maxBody, err := a.buildRequest(call, &args)
	if err != nil {
		return nil, err
	}
	timeout := a.timeout
	if args.Timeout > 0 {
		timeout = args.Timeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req = req.WithContext(actx)

	log := call.Log().With("action", Name, "method", req.Method, "host", req.URL.Host)
	key := ""
	if len(args.Cache.Methods) > 0 {
		if !slices.Contains(args.Cache.Methods, req.Method) {
			return nil, actions.ValidationError("cache", "%s is not cached unless cache.methods lists it (cache: true caches GET and HEAD)", req.Method)
		}
		if key, err = cacheKey(req, call); err != nil {
			return nil, actions.ValidationError("body", "%v", err)
		}
		if out, ok := cached(ctx, call, log, key); ok {
			return out, nil
		}
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, transportError(ctx, actx, req, err)
	}
	defer resp.Body.Close()

	body, err := readCapped(resp, maxBody)
	if err != nil {
		if e := actions.ContextError(ctx, describe(req)); e != nil {
			return nil, e
		}
		if e := actions.ContextError(actx, describe(req)); e != nil {
			return nil, e
		}
		var tooLarge *tooLargeError
		if errors.As(err, &tooLarge) {
			return nil, actions.NewError(TypeResponseTooLarge, false,
				"%s %s: response body exceeds max_response_bytes (%d); raise max_response_bytes or ask for less",
				req.Method, redactURL(req.URL), maxBody).WithStatus(resp.StatusCode)
		}
		return nil, actions.NewError(actions.TypeHTTPConnection, true, "%s %s: reading the response: %w",
			req.Method, redactURL(req.URL), err).WithStatus(resp.StatusCode)
	}
	log.Debug("http response", "status", resp.StatusCode, "bytes", len(body))

	out := map[string]any{
		"status":  int64(resp.StatusCode),
		"headers": flattenHeaders(resp.Header),
		"body":    string(body),
	}
	parsed, isJSON, perr := parseBody(resp.Header.Get("Content-Type"), body)
	if isJSON && perr == nil {
		out["body"] = parsed
	}
	if e := statusError(req, resp.StatusCode, args.ExpectStatus); e != nil {
		return nil, e.WithOutput(out)
	}
	if perr != nil {
		return nil, actions.NewError(TypeInvalidBody, false, "%s %s: the response says it is JSON but is not: %w",
			req.Method, redactURL(req.URL), perr).WithStatus(resp.StatusCode).WithOutput(out)
	}
	if key != "" {
		keep(ctx, call, log, key, out)
	}
	return out, nil
}

func (a *Action) buildRequest(call *actions.Call, args *Args) (*nethttp.Request, int64, error) {
	method := strings.ToUpper(args.Method)
	if method == "" {
		method = "GET"
	}
	if !slices.Contains(methods, method) {
		return nil, 0, actions.ValidationError("method", "want one of %s, got %q", strings.Join(methods, ", "), args.Method)
	}
	u, err := url.Parse(args.URL)
	if err != nil {
		// url.Error repeats the whole URL, which may carry a token; keep only the reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, 0, actions.ValidationError("url", "not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, 0, actions.ValidationError("url", "want an http:// or https:// URL, got %q", redactURL(u))
	}
	if u.Host == "" {
		return nil, 0, actions.ValidationError("url", "no host in %q", redactURL(u))
	}
	if len(args.Query) > 0 {
		q := u.Query()
		for k, v := range args.Query {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
	}
	maxBody := a.maxBody
	if args.MaxResponseBytes != nil {
		if *args.MaxResponseBytes <= 0 {
			return nil, 0, actions.ValidationError("max_response_bytes", "want a positive number of bytes, got %d", *args.MaxResponseBytes)
		}
		maxBody = *args.MaxResponseBytes
	}

	header := nethttp.Header{}
	for k, v := range args.Headers {
		if !validHeaderName(k) {
			return nil, 0, actions.ValidationError("headers."+k, "not a valid header name")
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, 0, actions.ValidationError("headers."+k, "value contains a line break or NUL")
		}
		header.Set(k, v)
	}
	var body io.Reader
	var contentType string
	switch b := args.Body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
		contentType = "text/plain; charset=utf-8"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, 0, actions.ValidationError("body", "cannot be sent as JSON: %v", err)
		}
		body = bytes.NewReader(data)
		contentType = "application/json"
	}
	if contentType != "" && header.Get("Content-Type") == "" {
		header.Set("Content-Type", contentType)
	}
	if header.Get("Idempotency-Key") == "" {
		header.Set("Idempotency-Key", call.IdempotencyKey())
	}
	req, err := nethttp.NewRequest(method, u.String(), body)
	if err != nil {
		return nil, 0, actions.ValidationError("url", "%v", err)
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
		header.Del("Host")
	}
	req.Header = header
	// Basic credentials go out as base64 of user:password, in which an
	// encoding of a secret user or password alone cannot be found.
	if u := req.URL.User; u != nil && header.Get("Authorization") == "" {
		pass, _ := u.Password()
		call.Derive(u.Username() + ":" + pass) // what net/http sends for URL user info
	}
	if user, pass, ok := req.BasicAuth(); ok {
		call.Derive(user + ":" + pass)
	}
	return req, maxBody, nil
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		// RFC 9110 token characters.
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func transportError(parent, attempt context.Context, req *nethttp.Request, err error) error {
	what := describe(req)
	if e := actions.ContextError(parent, what); e != nil {
		return e
	}
	if e := actions.ContextError(attempt, what); e != nil {
		return e
	}
	// Strip url.Error: its message repeats the URL, which may carry secrets in its query.
	var uerr *url.Error
	if errors.As(err, &uerr) {
		if uerr.Timeout() {
			return actions.NewError(actions.TypeTimeout, true, "%s: timed out: %w", what, uerr.Err)
		}
		err = uerr.Err
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return actions.NewError(actions.TypeHTTPConnection, false, "%s: the server's TLS certificate was rejected: %w", what, err)
	}
	return actions.NewError(actions.TypeHTTPConnection, true, "%s: %w", what, err)
}

func statusError(req *nethttp.Request, status int, expect StatusList) *actions.Error {
	if expect == nil {
		if status >= 200 && status <= 299 {
			return nil
		}
	} else if slices.Contains(expect, status) {
		return nil
	}
	want := "a 2xx status"
	if expect != nil {
		want = fmt.Sprintf("status %v", []int(expect))
	}
	what := fmt.Sprintf("%s %s: got status %d %s, want %s", req.Method, redactURL(req.URL), status, nethttp.StatusText(status), want)
	var e *actions.Error
	switch {
	case status >= 500:
		e = actions.NewError(actions.TypeHTTP5xx, true, "%s", what)
	case status == nethttp.StatusRequestTimeout || status == nethttp.StatusTooManyRequests:
		e = actions.NewError(actions.TypeHTTP4xx, true, "%s", what)
	case status >= 400:
		e = actions.NewError(actions.TypeHTTP4xx, false, "%s", what)
	default:
		e = actions.NewError(TypeUnexpectedStatus, false, "%s", what)
	}
	return e.WithStatus(status)
}

type tooLargeError struct{}

// Error describes the condition; the caller builds the user-facing message.
func (*tooLargeError) Error() string { return "response body too large" }

func readCapped(resp *nethttp.Response, max int64) ([]byte, error) {
	if resp.ContentLength > max {
		return nil, &tooLargeError{}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &tooLargeError{}
	}
	return data, nil
}

// parseBody parses body when contentType is JSON; isJSON reports whether it is.
func parseBody(contentType string, body []byte) (v any, isJSON bool, err error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil, false, nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, true, nil
	}
	v, err = actions.DecodeJSON(body)
	return v, true, err
}

func flattenHeaders(h nethttp.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, vs := range h {
		out[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return out
}

// describe names a request in messages: method and redacted URL.
func describe(req *nethttp.Request) string {
	return req.Method + " " + redactURL(req.URL)
}

// redactURL renders u without user info or query values, which often carry tokens.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = "…"
	}
	return c.String()
}
