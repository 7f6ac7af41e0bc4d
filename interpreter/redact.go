package interpreter

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/runtime"
)

// redacted replaces a secret's value wherever it would be stored or shown.
const redacted = "***"

// redactor replaces secret values, in every encoded form listed at
// encodedForms, in text and values. It is safe for concurrent use: the
// items of a foreach register derived values (derive) while others redact.
type redactor struct {
	mu       sync.RWMutex
	plain    []string // the secret values and the derived values that carry one
	patterns []string // every encoded form of plain, deduplicated, longest first; replaced, never modified
}

// newRedactor returns a redactor of values; empty ones are ignored.
func newRedactor(values []string) *redactor {
	r := &redactor{}
	for _, v := range values {
		r.addLocked(v)
	}
	return r
}

// addLocked adds v and its encoded forms; r.mu is held or r unshared.
func (r *redactor) addLocked(v string) {
	if v == "" || slices.Contains(r.plain, v) {
		return
	}
	r.plain = append(r.plain, v)
	// A new slice: text works on a snapshot of the old one unlocked.
	patterns := slices.Clone(r.patterns)
	for _, f := range encodedForms(v) {
		if !slices.Contains(patterns, f) {
			patterns = append(patterns, f)
		}
	}
	// Longest first, so that of two matches starting at one place the
	// longer one is found first (all are merged anyway).
	slices.SortStableFunc(patterns, func(a, b string) int { return len(b) - len(a) })
	r.patterns = patterns
}

// derive registers a value an action built from its arguments and sent,
// such as the user:password of HTTP Basic credentials: when it carries a
// secret (in any form), its own encoded forms are redacted from then on,
// since an encoding of the whole (base64 of user:password) does not
// contain an encoding of the secret alone.
func (r *redactor) derive(v string) {
	if r == nil || v == "" || r.text(v) == v {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(v)
}

func (r *redactor) snapshot() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.patterns
}

func (r *redactor) active() bool { return len(r.snapshot()) > 0 }

// text returns s with every match of every pattern replaced by redacted.
// Overlapping matches (of one secret's forms, or of two secrets) are
// merged into one replacement, so no part of either survives.
func (r *redactor) text(s string) string {
	patterns := r.snapshot()
	if len(patterns) == 0 || s == "" {
		return s
	}
	var spans []span
	for _, p := range patterns {
		spans = appendMatches(spans, s, p)
	}
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var sb strings.Builder
	last := 0
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		for i++; i < len(spans) && spans[i].start < end; i++ {
			end = max(end, spans[i].end)
		}
		sb.WriteString(s[last:start])
		sb.WriteString(redacted)
		last = end
	}
	sb.WriteString(s[last:])
	return sb.String()
}

// span is a match [start, end) of a pattern in a text.
type span struct{ start, end int }

// appendMatches appends the matches of p in s, overlapping ones of p
// already merged.
func appendMatches(spans []span, s, p string) []span {
	first := len(spans)
	for i := 0; i <= len(s)-len(p); {
		j := strings.Index(s[i:], p)
		if j < 0 {
			break
		}
		start := i + j
		if n := len(spans); n > first && start < spans[n-1].end {
			spans[n-1].end = start + len(p)
		} else {
			spans = append(spans, span{start, start + len(p)})
		}
		i = start + 1
	}
	return spans
}

// value returns a copy of a plain value with secrets replaced in every
// string, map keys included. A number whose decimal text holds a secret
// (a numeric secret echoed as a JSON number) becomes the string redacted.
func (r *redactor) value(v any) any {
	if !r.active() {
		return v
	}
	return r.valueOf(v)
}

func (r *redactor) valueOf(v any) any {
	switch x := v.(type) {
	case string:
		return r.text(x)
	case int64:
		if t := strconv.FormatInt(x, 10); r.text(t) != t {
			return redacted
		}
	case float64:
		for _, t := range []string{strconv.FormatFloat(x, 'f', -1, 64), strconv.FormatFloat(x, 'g', -1, 64)} {
			if r.text(t) != t {
				return redacted
			}
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.valueOf(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.text(k)] = r.valueOf(e)
		}
		return out
	}
	return v
}

// bytes returns b with secrets replaced, as text.
func (r *redactor) bytes(b []byte) []byte {
	if !r.active() {
		return b
	}
	if t := r.text(string(b)); t != string(b) {
		return []byte(t)
	}
	return b
}

// err returns err with secrets replaced in its message, keeping what
// errors.Is and errors.As see, and a runtime.StepError (transient or permanent) on top.
func (r *redactor) err(err error) error {
	if err == nil || !r.active() {
		return err
	}
	msg := err.Error()
	red := r.text(msg)
	if red == msg {
		return err
	}
	out := error(&redactedError{msg: red, err: err})
	var se *runtime.StepError
	if errors.As(err, &se) {
		out = &runtime.StepError{Permanent: se.Permanent, Err: out}
	}
	return out
}

// redactedError is an error whose message had secrets replaced.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// encodedForms returns s and the forms of s that redaction covers: the
// forms a value takes on its way out of a workflow and back in an echo.
//
//   - s itself;
//   - URL escaping: url.QueryEscape (space as +), url.PathEscape, a URL
//     path as url.URL writes it (slashes kept) and URL user info, each
//     also with lower-case hex digits (%2f);
//   - JSON string escaping, without the quotes: as encoding/json writes it
//     (HTML characters as \u003c), without HTML escaping, and with every
//     non-ASCII character as \uXXXX (Python's default);
//   - base64 of each of these texts (so also of a JSON or form body that
//     carries s, as API gateways pass bodies on), standard and URL
//     alphabets, padded and raw; and, so that the text is found inside the
//     base64 of a longer one, the characters of its encoding at each of
//     the three byte offsets (0, 1, 2) within a 3-byte group that depend
//     on its bytes alone (the partial character at either edge, which
//     mixes in bits of the neighbouring bytes, is left, so at most 4 bits
//     of s per edge remain beside the ***);
//   - each base64 form query-escaped (+ / = as %2B %2F %3D, either case);
//   - hex of s's bytes, lower and upper case.
//
// Not covered: other encodings (HTML entities, compression, hashes),
// escapes nested deeper than these (JSON inside JSON, base64 of base64),
// and a secret split across two values.
func encodedForms(s string) []string {
	if s == "" {
		return nil
	}
	var forms []string
	add := func(fs ...string) {
		for _, f := range fs {
			if f != "" && !slices.Contains(forms, f) {
				forms = append(forms, f)
			}
		}
	}
	add(s)
	for _, f := range []string{
		url.QueryEscape(s),
		url.PathEscape(s),
		(&url.URL{Path: s}).EscapedPath(),
		strings.TrimPrefix(url.UserPassword("", s).String(), ":"),
	} {
		add(f, lowerHex(f))
	}
	add(jsonForms(s)...)
	texts := slices.Clone(forms)
	// Hex of the bytes (a hex dump, a hex-encoded body), both cases; a
	// byte is two digits, so the form is found inside a longer hex text.
	h := hex.EncodeToString([]byte(s))
	add(h, strings.ToUpper(h))
	for _, t := range texts {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			b64 := append([]string{enc.EncodeToString([]byte(t)), enc.WithPadding(base64.NoPadding).EncodeToString([]byte(t))},
				base64Cores(enc, t)...)
			for _, f := range b64 {
				q := url.QueryEscape(f)
				add(f, q, lowerHex(q))
			}
		}
	}
	return forms
}

// lowerHex returns a percent-encoded s with lower-case hex digits.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerASCII(b[i+1]), lowerASCII(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonForms returns s escaped as a JSON string's contents, three ways.
func jsonForms(s string) []string {
	html, _ := json.Marshal(s)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	plainJSON := strings.TrimSuffix(buf.String(), "\n")
	inner := func(q string) string { return strings.TrimSuffix(strings.TrimPrefix(q, `"`), `"`) }
	var ascii strings.Builder
	for _, c := range inner(plainJSON) {
		if c < utf8.RuneSelf {
			ascii.WriteRune(c)
			continue
		}
		for _, u := range utf16.Encode([]rune{c}) {
			fmt.Fprintf(&ascii, "\\u%04x", u)
		}
	}
	return []string{inner(string(html)), inner(plainJSON), ascii.String()}
}

// base64Cores returns, for each byte offset k (0, 1, 2) of s within a
// 3-byte group, the characters of enc's encoding that carry bits of s
// only: character j of an encoding holds bits [6j, 6j+6) of the bytes.
func base64Cores(enc *base64.Encoding, s string) []string {
	raw := enc.WithPadding(base64.NoPadding)
	out := make([]string, 0, 3)
	for k := range 3 {
		buf := make([]byte, k+len(s))
		copy(buf[k:], s)
		full := raw.EncodeToString(buf)
		first := (8*k + 5) / 6      // the first character starting at or after bit 8k
		end := 8 * (k + len(s)) / 6 // characters ending at or before the last bit of s
		if end > first {
			out = append(out, full[first:end])
		}
	}
	return out
}

// handler is a slog.Handler that redacts secrets from messages and
// string attributes before passing records on.
type handler struct {
	next slog.Handler
	r    *redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.text(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.text(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.attr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.r.text(err.Error()))
		}
		return slog.String(a.Key, h.r.text(fmt.Sprint(v.Any())))
	}
	return a
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return &handler{next: h.next.WithAttrs(red), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), r: h.r}
}

// logger returns l redacting r's secrets.
func (r *redactor) logger(l *slog.Logger) *slog.Logger {
	if !r.active() {
		return l
	}
	return slog.New(&handler{next: l.Handler(), r: r})
}

// jsonRoundTrip converts v to the values jsonschema validates.
func jsonRoundTrip(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	return strings.Join(strings.Fields(s), " ")
}
