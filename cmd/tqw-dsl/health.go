package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/storage"
)

// Store health on the terminal: a writer whose store stops answering
// (S3 down, network cut) starts no step and retries its settlements until
// the store is back. The commands say so once, then with a heartbeat,
// instead of looking stuck.
const (
	// unreachableAfter is how long requests must have failed before the
	// outage is announced (a single retried request is not one).
	unreachableAfter = time.Second
	// unreachableHeartbeat is how often a continuing outage is repeated.
	unreachableHeartbeat = 10 * time.Second
	// healthPoll is how often the writer's store health is read (memory).
	healthPoll = 250 * time.Millisecond
)

// healthEvent is the --json form of a store health change.
type healthEvent struct {
	Event string `json:"event"` // store_unreachable, store_reachable
	Store string `json:"store"`
	Since string `json:"since,omitempty"`
	// ForMS is how long the store has been unreachable so far (or was).
	ForMS int64  `json:"for_ms"`
	Error string `json:"error,omitempty"`
}

// watchHealth reports changes of health() on w until ctx is done: one
// line when the store stops answering, a heartbeat every
// unreachableHeartbeat while it stays away, one line when it is back.
func watchHealth(ctx context.Context, url string, health func() storage.Health, w io.Writer, asJSON bool, mu *sync.Mutex) {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	var announced, lastBeat time.Time
	var since time.Time
	say := func(ev healthEvent, text string) {
		mu.Lock()
		defer mu.Unlock()
		if asJSON {
			_ = json.NewEncoder(w).Encode(ev)
			return
		}
		fmt.Fprintln(w, "tqw-dsl: "+text)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := health()
		now := time.Now()
		switch {
		case h.Failing && announced.IsZero() && now.Sub(h.Since) >= unreachableAfter:
			announced, lastBeat, since = now, now, h.Since
			say(healthEvent{Event: "store_unreachable", Store: url, Since: h.Since.UTC().Format(time.RFC3339Nano),
				ForMS: now.Sub(h.Since).Milliseconds(), Error: errText(h.LastError)},
				fmt.Sprintf("the store %s is unreachable since %s (%v); no step starts until it answers, and finished steps are kept until they are durable",
					url, h.Since.Local().Format("15:04:05"), h.LastError))
		case h.Failing && !announced.IsZero() && now.Sub(lastBeat) >= unreachableHeartbeat:
			lastBeat = now
			say(healthEvent{Event: "store_unreachable", Store: url, Since: since.UTC().Format(time.RFC3339Nano),
				ForMS: now.Sub(since).Milliseconds(), Error: errText(h.LastError)},
				fmt.Sprintf("the store is still unreachable after %s (%v); retrying", now.Sub(since).Round(time.Second), h.LastError))
		case !h.Failing && !announced.IsZero():
			say(healthEvent{Event: "store_reachable", Store: url, ForMS: now.Sub(since).Milliseconds()},
				fmt.Sprintf("the store answers again after %s; continuing", now.Sub(since).Round(100*time.Millisecond)))
			announced = time.Time{}
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
