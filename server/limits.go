package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/server/wire"
)

// DefaultDurableTimeout is Config.DurableTimeout's default.
const DefaultDurableTimeout = 15 * time.Second

// retryAfter is the Retry-After, in seconds, of the 503s a client may
// retry: a store that does not confirm writes, a server still opening
// its store.
const retryAfter = 5

// durable bounds how long a request that writes (a submission, a signal,
// a cancellation) waits for the store to make the write durable.
func (s *Server) durable(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.DurableTimeout)
}

// unavailable answers 503 with Retry-After.
func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	writeError(w, http.StatusServiceUnavailable, "unavailable", "", msg)
}

// storeFailed answers a failure of the store (or the writer) with 503.
// A write the store did not confirm within Config.DurableTimeout was
// applied and may still become durable: the answer says so.
func (s *Server) storeFailed(w http.ResponseWriter, what string, err error) {
	s.log.Warn(what+" failed", "err", err)
	if errors.Is(err, interpreter.ErrDamagedObject) || errors.Is(err, interpreter.ErrDefinitionMissing) {
		writeError(w, http.StatusInternalServerError, "damaged", "", fmt.Sprintf("%s: %v (see tqw-dsl store check)", what, err))
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		unavailable(w, fmt.Sprintf("%s: the store did not confirm the write within %v; it may still take effect once the store accepts writes (GET /readyz says why it does not): %v",
			what, s.cfg.DurableTimeout, err))
		return
	}
	unavailable(w, fmt.Sprintf("%s: %v", what, err))
}

// answerReady is /readyz: 200 {"ok":true} when ready (nil: always)
// reports nil, else 503 with its error as the reason.
func answerReady(w http.ResponseWriter, r *http.Request, ready func(context.Context) error) {
	if ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			writeJSON(w, http.StatusServiceUnavailable, wire.Health{Reason: err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, wire.Health{OK: true})
}

// Starting is the handler of a process whose store is not open yet (a
// full disk or a store refusing writes can hold the opening up for
// long): /healthz answers 200, /readyz 503 with ready's reason, and
// every other request 503 with Retry-After. Swap in Server.Handler once
// the store is open.
func Starting(ready func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			writeJSON(w, http.StatusOK, wire.Health{OK: true})
		case "/readyz":
			answerReady(w, r, ready)
		default:
			msg := "the server is still opening its store; retry shortly"
			if err := ready(r.Context()); err != nil {
				msg += " (" + err.Error() + ")"
			}
			unavailable(w, msg)
		}
	})
}
