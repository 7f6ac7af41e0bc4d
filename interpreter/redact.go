package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Redacted replaces a secret's value wherever it would be stored or shown.
const Redacted = "***"

// redactor replaces secret values in text and values.
type redactor struct {
	values []string // non-empty secret values, longest first
}

func newRedactor(values []string) *redactor {
	r := &redactor{}
	for _, v := range values {
		if v != "" {
			r.values = append(r.values, v)
		}
	}
	// Longest first, so a secret containing another is replaced whole.
	for i := 1; i < len(r.values); i++ {
		for j := i; j > 0 && len(r.values[j]) > len(r.values[j-1]); j-- {
			r.values[j], r.values[j-1] = r.values[j-1], r.values[j]
		}
	}
	return r
}

func (r *redactor) active() bool { return r != nil && len(r.values) > 0 }

// text returns s with every secret value replaced.
func (r *redactor) text(s string) string {
	if !r.active() {
		return s
	}
	for _, v := range r.values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return s
}

// value returns a copy of a plain value with secrets replaced in every
// string, map keys included.
func (r *redactor) value(v any) any {
	if !r.active() {
		return v
	}
	switch x := v.(type) {
	case string:
		return r.text(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.text(k)] = r.value(e)
		}
		return out
	}
	return v
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
