package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/server/wire"
)

func (s *Server) sendSignal(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := signal.CheckKey(key); err != nil {
		badSignalKey(w, err)
		return
	}
	requireWaiting := false
	if v := r.URL.Query().Get("require_waiting"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "require_waiting", fmt.Sprintf("require_waiting %q: want true or false", v))
			return
		}
		requireWaiting = b
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(signal.MaxPayload)))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "payload", fmt.Sprintf("the signal payload is over %d bytes", signal.MaxPayload))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "payload", "reading the payload: "+err.Error())
		return
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = []byte("null")
	}
	if err := strictJSON(raw); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "payload", "the signal payload (the request body): "+err.Error())
		return
	}
	res, status, ok := s.signal(w, r, key, raw, requireWaiting)
	if ok {
		writeJSON(w, status, res)
	}
}

// badSignalKey answers a key signal.CheckKey refused.
func badSignalKey(w http.ResponseWriter, err error) {
	msg := strings.TrimPrefix(err.Error(), signal.ErrInvalidKey.Error()+" ")
	writeError(w, http.StatusBadRequest, "bad_request", "key", "the signal key (the path after /v1/signals/) "+msg)
}

// signal checks and sends a signal, answering a refusal itself.
func (s *Server) signal(w http.ResponseWriter, r *http.Request, key string, raw []byte, requireWaiting bool) (wire.SignalResponse, int, bool) {
	ctx := r.Context()
	// Checked before anything is written; the runtime checks again.
	if err := s.it.CheckSignal(ctx, s.rt.Queue(), key, raw); err != nil {
		s.signalRefused(w, key, err)
		return wire.SignalResponse{}, 0, false
	}
	// The run to tell the event streams about, read while it waits.
	waiter := ""
	if ws, err := s.it.Waiting(ctx, s.rt.Queue(), key); err == nil && ws != nil {
		waiter = ws.RunID
	}
	dctx, cancel := s.durable(r)
	defer cancel()
	res, err := s.rt.SendSignal(dctx, key, raw, signal.Options{RequireWaiting: requireWaiting})
	if err != nil {
		s.signalRefused(w, key, err)
		return wire.SignalResponse{}, 0, false
	}
	out := wire.SignalResponse{Delivered: "now"}
	if res.Outcome != signal.Delivered {
		out.Delivered = "buffered"
		if !res.Expires.IsZero() {
			e := res.Expires.UTC()
			out.Expires = &e
		}
	}
	if waiter != "" {
		s.events.touch(waiter)
	}
	s.signalDelivered(r)
	return out, http.StatusAccepted, true
}

func (s *Server) signalRefused(w http.ResponseWriter, key string, err error) {
	switch {
	case errors.Is(err, signal.ErrRejected):
		msg := strings.TrimPrefix(err.Error(), signal.ErrRejected.Error()+": ")
		// field is the JSON pointer of the payload's part at fault
		// (absent: the payload as a whole).
		at, _ := dsl.InstancePointer(err)
		writeError(w, http.StatusUnprocessableEntity, "signal_rejected", at, fmt.Sprintf("signal %q refused, nothing sent: %s", key, msg))
	case errors.Is(err, signal.ErrNoWaiter):
		writeError(w, http.StatusConflict, "no_waiter", "key", fmt.Sprintf("no run is waiting on %q; nothing was sent (require_waiting; without it the signal is buffered for the next step that waits on the key)", key))
	default:
		s.storeFailed(w, fmt.Sprintf("signal %q", key), err)
	}
}
