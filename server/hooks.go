package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"go.yaml.in/yaml/v3"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/server/wire"
)

// Hook is one webhook in: POST /v1/hooks/{Name} starts a run of Workflow
// with the request body as input, or delivers the body as a signal on the
// key Signal renders. A request must carry a valid HMAC signature or the
// bearer token; with DeliveryHeader set, a delivery id seen before is
// answered as a duplicate and changes nothing, and so is a signature an
// HMAC hook accepted before, whatever delivery id comes with it. A
// form-encoded body (application/x-www-form-urlencoded, as GitHub sends
// when so configured) carries its JSON in the payload field; the
// signature covers the raw body.
type Hook struct {
	Name string `yaml:"name"`
	// Workflow is a file of the workflows folder; Signal a key template
	// whose {body.PATH}, {query.NAME} and {header.NAME} are replaced by
	// the request's values. Exactly one is set.
	Workflow string `yaml:"workflow"`
	Signal   string `yaml:"signal"`
	// HMAC checks a signature of the body; Bearer a token.
	HMAC   *HookHMAC   `yaml:"hmac"`
	Bearer *HookSecret `yaml:"bearer"`
	// DeliveryHeader names the header carrying the sender's delivery id
	// (X-GitHub-Delivery, Idempotency-Key, ...).
	DeliveryHeader string `yaml:"delivery_header"`
	// MaxBody bounds the request body, in bytes: 0 takes the hooks
	// file's max_body, else the loader's default (serve
	// --hook-max-body), else DefaultHookMaxBody.
	MaxBody int64 `yaml:"max_body"`
}

// DefaultHookMaxBody is a hook's body limit when nothing sets one;
// MaxHookMaxBody bounds what may be set (the body becomes a run's input
// or a signal's payload).
const (
	DefaultHookMaxBody int64 = 1 << 20
	MaxHookMaxBody     int64 = 32 << 20
)

// HookHMAC is an HMAC-SHA256 signature check.
type HookHMAC struct {
	HookSecret `yaml:",inline"`
	// Header carries the signature (X-Hub-Signature-256, Stripe-Signature).
	Header string `yaml:"header"`
	// Format is "github" (sha256=<hex of HMAC(body)>, the default) or
	// "stripe" (t=<unix seconds>,v1=<hex of HMAC("<t>.<body>")>, refused
	// when t is more than Tolerance away from now).
	Format string `yaml:"format"`
	// Tolerance bounds a stripe signature's age (default 5m).
	Tolerance time.Duration `yaml:"tolerance"`
}

// HookSecret names where a secret comes from: an environment variable or
// a file (its content, without a trailing newline). It is never inline.
type HookSecret struct {
	Env  string `yaml:"secret_env"`
	File string `yaml:"secret_file"`
	// value is the secret, read by LoadHooks.
	value []byte
}

// hooksFile is the --hooks YAML document.
type hooksFile struct {
	// MaxBody is the body limit of the hooks that set none.
	MaxBody int64  `yaml:"max_body"`
	Hooks   []Hook `yaml:"hooks"`
}

// HookDefaults are what LoadHooksWith gives the hooks of a file that
// leaves them unset.
type HookDefaults struct {
	// MaxBody is the body limit of the hooks neither they nor the file
	// bound (0: DefaultHookMaxBody).
	MaxBody int64
}

// ErrHooks is matched by LoadHooks's errors.
var ErrHooks = errors.New("server: hooks file")

// LoadHooks reads a hooks file (see Hook) and the secrets it names from
// getenv and files.
func LoadHooks(path string, getenv func(string) string) ([]Hook, error) {
	return LoadHooksWith(path, getenv, HookDefaults{})
}

// LoadHooksWith is LoadHooks with defaults for what the file leaves
// unset.
func LoadHooksWith(path string, getenv func(string) string, d HookDefaults) ([]Hook, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHooks, err)
	}
	var f hooksFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrHooks, path, err)
	}
	for i := range f.Hooks {
		h := &f.Hooks[i]
		if h.MaxBody == 0 {
			h.MaxBody = f.MaxBody
		}
		if h.MaxBody == 0 {
			h.MaxBody = d.MaxBody
		}
		for _, sec := range []*HookSecret{h.bearerSecret(), h.hmacSecret()} {
			if sec == nil {
				continue
			}
			if err := sec.read(getenv); err != nil {
				return nil, fmt.Errorf("%w %s: hook %q: %w", ErrHooks, path, h.Name, err)
			}
		}
		if err := h.check(); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrHooks, path, err)
		}
	}
	return f.Hooks, nil
}

func (h *Hook) bearerSecret() *HookSecret { return h.Bearer }

func (h *Hook) hmacSecret() *HookSecret {
	if h.HMAC == nil {
		return nil
	}
	return &h.HMAC.HookSecret
}

func (sec *HookSecret) read(getenv func(string) string) error {
	switch {
	case sec.Env != "" && sec.File != "":
		return errors.New("give secret_env or secret_file, not both")
	case sec.Env != "":
		sec.value = []byte(getenv(sec.Env))
		if len(sec.value) == 0 {
			return fmt.Errorf("the environment variable %s (secret_env) is not set", sec.Env)
		}
	case sec.File != "":
		b, err := os.ReadFile(sec.File)
		if err != nil {
			return fmt.Errorf("secret_file: %w", err)
		}
		sec.value = bytes.TrimRight(b, "\r\n")
	default:
		return errors.New("the secret needs secret_env or secret_file")
	}
	if len(sec.value) < 16 {
		return fmt.Errorf("the secret is %d bytes; want at least 16", len(sec.value))
	}
	return nil
}

// SetSecret sets a hook secret's value directly (programs that build
// hooks in Go rather than from a file).
func (sec *HookSecret) SetSecret(v []byte) { sec.value = append([]byte(nil), v...) }

var (
	hookNameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	placeholderRE = regexp.MustCompile(`\{(body|query|header)\.([^{}]+)\}`)
)

// check validates a hook's definition.
func (h *Hook) check() error {
	if !hookNameRE.MatchString(h.Name) {
		return fmt.Errorf("hook name %q: want 1 to 64 lower-case letters, digits, '-' or '_'", h.Name)
	}
	if (h.Workflow == "") == (h.Signal == "") {
		return fmt.Errorf("hook %q: set exactly one of workflow and signal", h.Name)
	}
	if h.Workflow != "" && !isWorkflowFile(h.Workflow) {
		return fmt.Errorf("hook %q: workflow %q: want a NAME.yaml file of the workflows folder", h.Name, h.Workflow)
	}
	if h.Signal != "" {
		rest := placeholderRE.ReplaceAllString(h.Signal, "")
		if strings.ContainsAny(rest, "{}") {
			return fmt.Errorf("hook %q: signal %q: a placeholder is {body.PATH}, {query.NAME} or {header.NAME}", h.Name, h.Signal)
		}
	}
	if (h.HMAC == nil) == (h.Bearer == nil) {
		return fmt.Errorf("hook %q: set exactly one of hmac and bearer: a hook without a credential would let anyone start runs", h.Name)
	}
	if h.HMAC != nil {
		if h.HMAC.Header == "" {
			return fmt.Errorf("hook %q: hmac.header names the signature header (X-Hub-Signature-256, Stripe-Signature)", h.Name)
		}
		switch h.HMAC.Format {
		case "":
			h.HMAC.Format = "github"
		case "github", "stripe":
		default:
			return fmt.Errorf("hook %q: hmac.format %q: want github or stripe", h.Name, h.HMAC.Format)
		}
		if h.HMAC.Tolerance <= 0 {
			h.HMAC.Tolerance = 5 * time.Minute
		}
		if len(h.HMAC.value) == 0 {
			return fmt.Errorf("hook %q: the hmac secret is not set", h.Name)
		}
	}
	if h.Bearer != nil && len(h.Bearer.value) == 0 {
		return fmt.Errorf("hook %q: the bearer token is not set", h.Name)
	}
	if h.MaxBody == 0 {
		h.MaxBody = DefaultHookMaxBody
	}
	if h.MaxBody < 0 || h.MaxBody > MaxHookMaxBody {
		return fmt.Errorf("hook %q: max_body %d: want 1 to %d bytes", h.Name, h.MaxBody, MaxHookMaxBody)
	}
	return nil
}

// hookState is a configured hook.
type hookState struct {
	*Hook
	// replayLocks serialize a workflow hook's requests of one signature
	// (by its first byte) between the check for an earlier run of it and
	// the submission: this process is the store's only writer, so no two
	// deliveries of one signature start two runs.
	replayLocks [16]sync.Mutex
}

func newHookState(h *Hook) *hookState { return &hookState{Hook: h} }

// LabelHookSignature labels a workflow hook's run with a digest of the
// signature that started it, in the submission's own commit: a replay
// of the request under another delivery id finds the run through the
// label index and starts nothing while the run is retained.
const LabelHookSignature = "hook.signature"

// hookMarkerPrefix holds the delivery ids of signal hooks.
var hookMarkerPrefix = func() string {
	p, err := runtime.ControlKVPrefix("hooks")
	if err != nil {
		panic(err) // a constant name the runtime accepts
	}
	return p
}()

func (s *Server) hook(w http.ResponseWriter, r *http.Request) {
	h, ok := s.hooks[r.PathValue("name")]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "name", fmt.Sprintf("no hook %q is configured (--hooks)", r.PathValue("name")))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.MaxBody))
	if err != nil {
		hookBodyFailed(w, err, h.MaxBody)
		return
	}
	mac, err := h.verify(r, body, s.rt.Clock().Now())
	if err != nil {
		writeError(w, http.StatusUnauthorized, "bad_signature", h.credentialHeader(), err.Error())
		return
	}
	payload, err := hookPayload(r, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body", err.Error())
		return
	}
	delivery := ""
	if h.DeliveryHeader != "" {
		delivery = r.Header.Get(h.DeliveryHeader)
		if delivery == "" {
			writeError(w, http.StatusBadRequest, "bad_request", h.DeliveryHeader, fmt.Sprintf("the delivery id header %s is missing", h.DeliveryHeader))
			return
		}
	}
	if h.Workflow != "" {
		s.hookRun(w, r, h, payload, delivery, mac)
		return
	}
	s.hookSignal(w, r, h, payload, delivery, mac)
}

// hookBodyFailed answers a body that could not be read: 413 only when it
// is over the hook's limit; a body cut short (a client that went away,
// fewer bytes than its Content-Length) is 400, one that did not arrive
// within the server's read timeout 408.
func hookBodyFailed(w http.ResponseWriter, err error, limit int64) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "body", fmt.Sprintf("the body is over %d bytes, this hook's max_body", limit))
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(w, http.StatusRequestTimeout, "timeout", "body", "the body did not arrive within the server's read timeout")
	default:
		writeError(w, http.StatusBadRequest, "bad_request", "body", "the body could not be read to its end: "+err.Error())
	}
}

// hookPayload returns the JSON a hook request carries: its body, or the
// payload field of a form-encoded body (GitHub's
// application/x-www-form-urlencoded content type).
func hookPayload(r *http.Request, body []byte) ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("the form-encoded body does not parse: %v", err)
	}
	p := form["payload"]
	if len(p) != 1 {
		return nil, fmt.Errorf("a form-encoded body (Content-Type application/x-www-form-urlencoded) carries its JSON in one payload field; it has %d", len(p))
	}
	return []byte(p[0]), nil
}

func (h *hookState) credentialHeader() string {
	if h.HMAC != nil {
		return h.HMAC.Header
	}
	return "Authorization"
}

// verify checks the request's signature or bearer token. It returns the
// HMAC an HMAC hook accepted (it covers the body, and a Stripe
// signature's time), which marks the request's replays; nil for a bearer
// hook, whose token holder can send any body, so an identical one proves
// nothing.
func (h *hookState) verify(r *http.Request, body []byte, now time.Time) ([]byte, error) {
	if h.Bearer != nil {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		a, b := sha256.Sum256([]byte(got)), sha256.Sum256(h.Bearer.value)
		if !ok || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return nil, errors.New("the Authorization header does not carry this hook's bearer token")
		}
		return nil, nil
	}
	sig := r.Header.Get(h.HMAC.Header)
	if sig == "" {
		return nil, fmt.Errorf("the signature header %s is missing", h.HMAC.Header)
	}
	mac := hmac.New(sha256.New, h.HMAC.value)
	if h.HMAC.Format == "github" {
		hexSig, ok := strings.CutPrefix(sig, "sha256=")
		want, err := hex.DecodeString(hexSig)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: want sha256=<hex HMAC-SHA256 of the body>", h.HMAC.Header)
		}
		mac.Write(body)
		got := mac.Sum(nil)
		if !hmac.Equal(got, want) {
			return nil, fmt.Errorf("%s does not match the body: wrong secret, or the body changed", h.HMAC.Header)
		}
		return got, nil
	}
	// Stripe: t=<unix>,v1=<hex>[,v1=<hex>...]
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(sig, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return nil, fmt.Errorf("%s: want t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">", h.HMAC.Header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > h.HMAC.Tolerance || d < -h.HMAC.Tolerance {
		return nil, fmt.Errorf("%s: its timestamp is %v away from now (tolerance %v): a replay, or a wrong clock", h.HMAC.Header, d.Round(time.Second), h.HMAC.Tolerance)
	}
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, b := range sigs {
		if hmac.Equal(want, b) {
			return want, nil
		}
	}
	return nil, fmt.Errorf("%s does not match the body: wrong secret, or the body changed", h.HMAC.Header)
}

// signatureDigest names an accepted HMAC in records and labels.
func signatureDigest(name string, mac []byte) string {
	sum := sha256.Sum256(append([]byte(name+"\x00"), mac...))
	return hex.EncodeToString(sum[:16])
}

// hookRunID is the run id of a workflow hook's delivery: the same id for
// a replayed delivery, so the submission is idempotent.
func hookRunID(name, delivery string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + delivery))
	return "hook-" + name + "-" + hex.EncodeToString(sum[:16])
}

func (s *Server) hookRun(w http.ResponseWriter, r *http.Request, h *hookState, body []byte, delivery string, mac []byte) {
	input := any(map[string]any{})
	if len(bytes.TrimSpace(body)) > 0 {
		v, err := interpreter.DecodeJSON(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "body", "the body is not valid JSON: "+err.Error())
			return
		}
		input = v
	}
	wf, ok := s.loadRequested(w, wire.SubmitRequest{Workflow: h.Workflow})
	if !ok {
		return
	}
	runID := ""
	if delivery != "" {
		runID = hookRunID(h.Name, delivery)
		if st, err := s.insp.Status(r.Context(), runID); err == nil {
			// Seen before (active or retained): whatever the body, a
			// replay does nothing.
			writeJSON(w, http.StatusOK, wire.HookResponse{RunID: st.RunID, Duplicate: true})
			return
		}
	}
	var opts []interpreter.SubmitOption
	if mac != nil {
		// The same signed request under another delivery id (or none) is
		// a replay: the run it started carries its digest.
		digest := signatureDigest(h.Name, mac)
		lock := &h.replayLocks[mac[0]%byte(len(h.replayLocks))]
		lock.Lock()
		defer lock.Unlock()
		prev, err := s.insp.ListRuns(r.Context(), runstate.ListOptions{Labels: map[string]string{LabelHookSignature: digest}, Limit: 1})
		if err != nil {
			s.storeFailed(w, "looking for an earlier run of this signature", err)
			return
		}
		if len(prev) > 0 {
			writeJSON(w, http.StatusOK, wire.HookResponse{RunID: prev[0].RunID, Duplicate: true})
			return
		}
		opts = append(opts, interpreter.WithLabels(map[string]string{LabelHookSignature: digest}))
	}
	out, status, ok := s.submit(w, wf, input, "", runID, r, opts...)
	if !ok {
		return
	}
	if !out.New {
		writeJSON(w, http.StatusOK, wire.HookResponse{RunID: out.RunID, Duplicate: true})
		return
	}
	if status == http.StatusCreated {
		status = http.StatusAccepted
	}
	writeJSON(w, status, wire.HookResponse{RunID: out.RunID, New: true})
}

// renderKey fills a signal key template from the request.
func renderKey(tmpl string, r *http.Request, body any) (string, error) {
	var missing error
	key := placeholderRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		p := placeholderRE.FindStringSubmatch(m)
		var v string
		switch p[1] {
		case "query":
			v = r.URL.Query().Get(p[2])
		case "header":
			v = r.Header.Get(p[2])
		case "body":
			cur := body
			for _, seg := range strings.Split(p[2], ".") {
				obj, ok := cur.(map[string]any)
				if !ok {
					cur = nil
					break
				}
				cur = obj[seg]
			}
			switch x := cur.(type) {
			case string:
				v = x
			case int64, float64, bool:
				v = fmt.Sprint(x)
			}
		}
		if v == "" && missing == nil {
			missing = fmt.Errorf("%s is missing or empty in the request (the hook's signal key needs it)", m)
		}
		return v
	})
	return key, missing
}

func (s *Server) hookSignal(w http.ResponseWriter, r *http.Request, h *hookState, body []byte, delivery string, mac []byte) {
	ctx := r.Context()
	raw := body
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("null")
	}
	parsed, err := interpreter.DecodeJSON(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body", "the body is not valid JSON: "+err.Error())
		return
	}
	key, err := renderKey(h.Signal, r, parsed)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body", err.Error())
		return
	}
	if err := runtime.ValidateSignal(key, raw); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body", err.Error())
		return
	}
	now := markerValue(s.rt.Clock().Now())
	var markers []storage.KVWrite
	if delivery != "" {
		markers = append(markers, storage.KVWrite{Key: hookMarkerKey(h.Name, delivery), Value: now})
	}
	if mac != nil {
		markers = append(markers, storage.KVWrite{Key: hookSignatureKey(h.Name, mac), Value: now})
	}
	if len(markers) == 0 {
		res, status, ok := s.signal(w, r, key, raw, false)
		if ok {
			writeJSON(w, status, wire.HookResponse{Delivered: res.Delivered})
		}
		return
	}
	// Exactly once per delivery id and per signature: the markers commit
	// with the buffered signal, so a replay finds one and writes nothing.
	if err := s.rt.AdmitSignal(ctx, key, raw, signal.Options{}); err != nil {
		s.signalRefused(w, key, err)
		return
	}
	marker := markers[0]
	value := s.rt.SignalValue(raw)
	err = s.rt.BufferSignal(ctx, key, value, marker, markers[1:]...)
	if errors.Is(err, runtime.ErrRecordExists) {
		writeJSON(w, http.StatusOK, wire.HookResponse{Duplicate: true})
		return
	}
	if err != nil {
		s.storeFailed(w, fmt.Sprintf("buffering signal %q", key), err)
		return
	}
	waiter := ""
	if ws, err := s.it.Waiting(ctx, s.rt.Queue(), key); err == nil && ws != nil {
		waiter = ws.RunID
	}
	out := wire.HookResponse{Delivered: "buffered"}
	if oc, err := s.rt.DeliverSignal(ctx, key, value, marker); err == nil && oc == signal.Delivered {
		out.Delivered = "now"
	}
	if waiter != "" {
		s.events.touch(waiter)
	}
	writeJSON(w, http.StatusAccepted, out)
}

func hookMarkerKey(name, delivery string) string {
	sum := sha256.Sum256([]byte(delivery))
	return hookMarkerPrefix + name + "/" + hex.EncodeToString(sum[:16])
}

// hookSignatureKey is the record of a signature a signal hook accepted.
func hookSignatureKey(name string, mac []byte) string {
	return hookMarkerPrefix + name + "/sig-" + signatureDigest(name, mac)
}

func markerValue(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixMilli()))
}

// HookDedupWindow is how long a signal hook remembers a delivery id and
// a signature.
const HookDedupWindow = 7 * 24 * time.Hour

// SweepHookMarkers deletes the delivery ids and signatures of signal
// hooks older than HookDedupWindow. Cost: memory reads, and one commit per expired id.
func (s *Server) SweepHookMarkers(ctx context.Context) (int, error) {
	q := s.rt.Queue()
	cutoff := uint64(s.rt.Clock().Now().Add(-HookDedupWindow).UnixMilli())
	n, after := 0, ""
	for {
		page, err := q.KVScan(ctx, hookMarkerPrefix, after, 256)
		if err != nil {
			return n, err
		}
		for _, e := range page {
			if len(e.Value) >= 8 && binary.BigEndian.Uint64(e.Value) < cutoff {
				if ok, err := q.KVCompareAndDelete(ctx, e.Key, e.Value); err != nil {
					return n, err
				} else if ok {
					n++
				}
			}
		}
		if len(page) < 256 {
			return n, nil
		}
		after = page[len(page)-1].Key
	}
}
