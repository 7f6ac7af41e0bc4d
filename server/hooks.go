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
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"go.yaml.in/yaml/v3"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
)

// Hook is one webhook in: POST /v1/hooks/{Name} starts a run of Workflow
// with the request body as input, or delivers the body as a signal on the
// key Signal renders. A request must carry a valid HMAC signature or the
// bearer token; with DeliveryHeader set, a delivery id seen before is
// answered as a duplicate and changes nothing.
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
}

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
	Hooks []Hook `yaml:"hooks"`
}

// ErrHooks is matched by LoadHooks's errors.
var ErrHooks = errors.New("server: hooks file")

// LoadHooks reads a hooks file (see Hook) and the secrets it names from
// getenv and files.
func LoadHooks(path string, getenv func(string) string) ([]Hook, error) {
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
	return nil
}

// hookState is a configured hook.
type hookState struct{ *Hook }

func newHookState(h *Hook) *hookState { return &hookState{Hook: h} }

// maxHookBody bounds a webhook's body.
const maxHookBody = 1 << 20

// hookMarkerPrefix holds the delivery ids of signal hooks.
var hookMarkerPrefix = func() string {
	p, err := runtime.ControlKVPrefix("hooks")
	if err != nil {
		panic(err) // a constant name the runtime accepts
	}
	return p
}()

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

func (s *Server) hook(w http.ResponseWriter, r *http.Request) {
	h, ok := s.hooks[r.PathValue("name")]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "name", fmt.Sprintf("no hook %q is configured (--hooks)", r.PathValue("name")))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxHookBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "", fmt.Sprintf("the body is over %d bytes", maxHookBody))
		return
	}
	if err := h.verify(r, body, s.rt.Clock().Now()); err != nil {
		writeError(w, http.StatusUnauthorized, "bad_signature", h.credentialHeader(), err.Error())
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
		s.hookRun(w, r, h, body, delivery)
		return
	}
	s.hookSignal(w, r, h, body, delivery)
}

func (h *hookState) credentialHeader() string {
	if h.HMAC != nil {
		return h.HMAC.Header
	}
	return "Authorization"
}

// verify checks the request's signature or bearer token.
func (h *hookState) verify(r *http.Request, body []byte, now time.Time) error {
	if h.Bearer != nil {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		a, b := sha256.Sum256([]byte(got)), sha256.Sum256(h.Bearer.value)
		if !ok || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return errors.New("the Authorization header does not carry this hook's bearer token")
		}
		return nil
	}
	sig := r.Header.Get(h.HMAC.Header)
	if sig == "" {
		return fmt.Errorf("the signature header %s is missing", h.HMAC.Header)
	}
	mac := hmac.New(sha256.New, h.HMAC.value)
	if h.HMAC.Format == "github" {
		hexSig, ok := strings.CutPrefix(sig, "sha256=")
		want, err := hex.DecodeString(hexSig)
		if !ok || err != nil {
			return fmt.Errorf("%s: want sha256=<hex HMAC-SHA256 of the body>", h.HMAC.Header)
		}
		mac.Write(body)
		if !hmac.Equal(mac.Sum(nil), want) {
			return fmt.Errorf("%s does not match the body: wrong secret, or the body changed", h.HMAC.Header)
		}
		return nil
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
		return fmt.Errorf("%s: want t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">", h.HMAC.Header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > h.HMAC.Tolerance || d < -h.HMAC.Tolerance {
		return fmt.Errorf("%s: its timestamp is %v away from now (tolerance %v): a replay, or a wrong clock", h.HMAC.Header, d.Round(time.Second), h.HMAC.Tolerance)
	}
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, b := range sigs {
		if hmac.Equal(want, b) {
			return nil
		}
	}
	return fmt.Errorf("%s does not match the body: wrong secret, or the body changed", h.HMAC.Header)
}

// hookRunID is the run id of a workflow hook's delivery: the same id for
// a replayed delivery, so the submission is idempotent.
func hookRunID(name, delivery string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + delivery))
	return "hook-" + name + "-" + hex.EncodeToString(sum[:16])
}

func (s *Server) hookRun(w http.ResponseWriter, r *http.Request, h *hookState, body []byte, delivery string) {
	input := any(map[string]any{})
	if len(bytes.TrimSpace(body)) > 0 {
		v, err := interpreter.DecodeJSON(body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "body", "the body is not valid JSON: "+err.Error())
			return
		}
		input = v
	}
	wf, ok := s.loadRequested(w, SubmitRequest{Workflow: h.Workflow})
	if !ok {
		return
	}
	runID := ""
	if delivery != "" {
		runID = hookRunID(h.Name, delivery)
		if st, err := s.insp.Status(r.Context(), runID); err == nil {
			// Seen before (active or retained): whatever the body, a
			// replay does nothing.
			writeJSON(w, http.StatusOK, HookResponse{RunID: st.RunID, Duplicate: true})
			return
		}
	}
	out, status, ok := s.submit(w, wf, input, "", runID, r)
	if !ok {
		return
	}
	if !out.New {
		writeJSON(w, http.StatusOK, HookResponse{RunID: out.RunID, Duplicate: true})
		return
	}
	if status == http.StatusCreated {
		status = http.StatusAccepted
	}
	writeJSON(w, status, HookResponse{RunID: out.RunID, New: true})
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

func (s *Server) hookSignal(w http.ResponseWriter, r *http.Request, h *hookState, body []byte, delivery string) {
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
	if delivery == "" {
		res, status, ok := s.signal(w, r, key, raw, false)
		if ok {
			writeJSON(w, status, HookResponse{Delivered: res.Delivered})
		}
		return
	}
	// Exactly once per delivery id: the marker commits with the buffered
	// signal, so a replay finds it and writes nothing.
	if err := s.rt.AdmitSignal(ctx, key, raw, signal.Options{}); err != nil {
		s.signalRefused(w, key, err)
		return
	}
	marker := storage.KVWrite{Key: hookMarkerKey(h.Name, delivery), Value: markerValue(s.rt.Clock().Now())}
	value := s.rt.SignalValue(raw)
	err = s.rt.BufferSignal(ctx, key, value, marker)
	if errors.Is(err, runtime.ErrRecordExists) {
		writeJSON(w, http.StatusOK, HookResponse{Duplicate: true})
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
	out := HookResponse{Delivered: "buffered"}
	if cur, err := s.rt.SignalBuffered(ctx, key); err == nil && bytes.Equal(cur, value) {
		oc, err := s.rt.DeliverSignal(ctx, key, value, marker)
		if err == nil && oc == signal.Delivered {
			out.Delivered = "now"
		}
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

func markerValue(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixMilli()))
}

// HookDedupWindow is how long a signal hook remembers a delivery id.
const HookDedupWindow = 7 * 24 * time.Hour

// SweepHookMarkers deletes the delivery ids of signal hooks older than
// HookDedupWindow. Cost: memory reads, and one commit per expired id.
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
