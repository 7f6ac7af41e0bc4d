package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/interpreter"
)

// waitHints prints, under run's step lines on a terminal, the command that
// sends the signal a step starts waiting for, with a payload shaped by the
// step's schema. It reads the store through its own read-only view, opened
// at the first wait: the step's history record names the key, the waiter
// record holds the schema.
type waitHints struct {
	url string
	// storeArg is " --store URL" when --store was given, so the printed
	// command reaches the same store; "" when it came from TQW_STORE or the
	// default, which the shell it is pasted in has too.
	storeArg string
	errOut   io.Writer
	// mu is the progress printer's, so a hint never splits a step line.
	mu *sync.Mutex

	viewMu sync.Mutex
	v      *view
	// ended is set when the run ended: a hint still being looked up is
	// not printed any more.
	ended bool
	wg    sync.WaitGroup
}

// hintTimeout bounds the reads of one hint.
const hintTimeout = 10 * time.Second

// waiting looks up, off the caller's goroutine (the interpreter's event
// callback must not block), the signal the attempt of step of runID that
// just ended waiting listens on, and prints how to send it.
func (h *waitHints) waiting(runID, step string, attempt int) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), hintTimeout)
		defer cancel()
		key, schema, ok := h.lookup(ctx, runID, step, attempt)
		if !ok {
			return
		}
		cmd := "tqw-dsl signal " + shellQuote(key)
		how := "a JSON payload may follow the key; without one it is null"
		if schema != nil {
			if b, err := json.Marshal(payloadExample(schema, 0)); err == nil {
				cmd += " " + shellQuote(string(b))
				how = "fill in the values; the step's schema checks them"
			}
		}
		cmd += h.storeArg
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.ended {
			fmt.Fprintf(h.errOut, "  waiting for the signal %s; send it with (%s):\n    %s\n", key, how, cmd)
		}
	}()
}

// lookup returns the key the record of step's attempt waits on and the
// schema of the step waiting on it; ok is false when the record waits on
// no signal (a sleep, a child run) or the store cannot tell.
func (h *waitHints) lookup(ctx context.Context, runID, step string, attempt int) (key string, schema any, ok bool) {
	h.viewMu.Lock()
	defer h.viewMu.Unlock()
	if h.v == nil {
		v, err := openView(ctx, h.url)
		if err != nil {
			return "", nil, false
		}
		h.v = v
	} else if err := h.v.r.Refresh(ctx); err != nil {
		return "", nil, false
	}
	recs, err := interpreter.History(ctx, h.v.records(), nil, runID)
	if err != nil {
		return "", nil, false
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Step == step && r.Attempt == attempt && r.Outcome == interpreter.OutcomeWaiting {
			key = r.WaitKey
			break
		}
	}
	if key == "" {
		return "", nil, false
	}
	w, err := h.v.defs.Waiting(ctx, h.v.r, key)
	if err == nil && w != nil && w.RunID == runID {
		schema = w.Schema
	}
	return key, schema, true
}

// end stops printing hints (the run ended), waits for the lookups in
// flight and closes the view.
func (h *waitHints) end() {
	h.mu.Lock()
	h.ended = true
	h.mu.Unlock()
	h.wg.Wait()
	h.viewMu.Lock()
	defer h.viewMu.Unlock()
	if h.v != nil {
		_ = h.v.Close()
		h.v = nil
	}
}

// payloadExample returns a value shaped as the JSON Schema asks, for a
// user to fill in: a const, the first enum value, the default or the first
// example when the schema gives one; else by type, "..." for a string, 0
// for a number, true for a boolean, and for an object its required
// properties (all of them when none is required).
func payloadExample(schema any, depth int) any {
	s, ok := schema.(map[string]any)
	if !ok || depth > 8 {
		return nil
	}
	if v, ok := s["const"]; ok {
		return v
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	if v, ok := s["default"]; ok {
		return v
	}
	if e, ok := s["examples"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, alt := range []string{"oneOf", "anyOf", "allOf"} {
		if a, ok := s[alt].([]any); ok && len(a) > 0 {
			return payloadExample(a[0], depth+1)
		}
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok {
		for _, t := range ts {
			if t, ok := t.(string); ok && t != "null" {
				typ = t
				break
			}
		}
	}
	props, _ := s["properties"].(map[string]any)
	if typ == "" && props != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		out := map[string]any{}
		names := map[string]bool{}
		if req, ok := s["required"].([]any); ok {
			for _, n := range req {
				if n, ok := n.(string); ok {
					names[n] = true
				}
			}
		}
		if len(names) == 0 {
			for n := range props {
				names[n] = true
			}
		}
		for n := range names {
			out[n] = payloadExample(props[n], depth+1)
		}
		return out
	case "array":
		if items, ok := s["items"]; ok {
			return []any{payloadExample(items, depth+1)}
		}
		return []any{}
	case "string":
		return "..."
	case "integer", "number":
		return 0
	case "boolean":
		return true
	}
	return nil
}

// shellQuote returns s as one word for a POSIX shell: unchanged when it
// holds only characters no shell treats specially, else single-quoted.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/@%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
