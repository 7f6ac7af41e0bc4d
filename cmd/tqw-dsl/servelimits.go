package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/server"
)

// serveLimits are serve's bounds on the time and the connections a
// client may hold (docs/OPERATIONS.md, "Limits").
type serveLimits struct {
	readTimeout, writeTimeout, idleTimeout, durableTimeout time.Duration
	maxConns, maxConnsPerClient                            int
}

// Defaults of serve's limits (docs/OPERATIONS.md, "Limits").
const (
	// defaultReadHeaderTimeout bounds a request's header (at most
	// --read-timeout).
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = time.Minute
	defaultWriteTimeout      = 2 * time.Minute
	defaultIdleTimeout       = 30 * time.Second
	// defaultMaxConns caps the automatic connection cap on a process
	// that may open many files.
	defaultMaxConns          = 10000
	defaultMaxConnsPerClient = 256
	// fdReserve is the file descriptors kept out of the connection cap
	// for the store, the lease, shell steps and the runtime itself.
	fdReserve = 256
)

func (l *serveLimits) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&l.readTimeout, "read-timeout", defaultReadTimeout, "longest a request may take to arrive, body included, and to be served (a stream of events excepted)")
	f.DurationVar(&l.writeTimeout, "write-timeout", defaultWriteTimeout, "longest from a request's header to the end of its answer (a stream of events excepted)")
	f.DurationVar(&l.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a keep-alive connection may sit idle between requests before serve closes it")
	f.DurationVar(&l.durableTimeout, "durable-timeout", server.DefaultDurableTimeout, "longest a submission, signal or cancel waits for the store to make it durable; past it the answer is 503 with Retry-After")
	f.IntVar(&l.maxConns, "max-conns", 0, fmt.Sprintf("most connections held at once, every client together (0: half the files the process may open beyond %d, at most %d)", fdReserve, defaultMaxConns))
	f.IntVar(&l.maxConnsPerClient, "max-conns-per-client", defaultMaxConnsPerClient, "most connections one client IP address holds at once (at most --max-conns)")
}

// check validates the flags and sets the connection caps against the
// process's file limit, raised to its hard limit first.
func (l *serveLimits) check() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--read-timeout", l.readTimeout}, {"--write-timeout", l.writeTimeout}, {"--idle-timeout", l.idleTimeout}, {"--durable-timeout", l.durableTimeout}} {
		if d.v <= 0 {
			return failf(exitUsage, "%s %v: want a positive duration, e.g. 30s", d.name, d.v)
		}
	}
	if l.maxConns < 0 || l.maxConnsPerClient < 0 {
		return failf(exitUsage, "--max-conns and --max-conns-per-client: want a positive count (0: --max-conns picks one)")
	}
	files, err := raiseFileLimit()
	if err != nil {
		return failf(exitFailed, "reading the limit of open files: %v", err)
	}
	room := int(min(files, 1<<30)) - fdReserve
	if room < 32 {
		return failf(exitFailed, "the process may open only %d files; serve needs more than %d (raise it with ulimit -n)", files, fdReserve+32)
	}
	switch {
	case l.maxConns == 0:
		l.maxConns = min(room/2, defaultMaxConns)
	case l.maxConns > room:
		return failf(exitUsage, "--max-conns %d: the process may open %d files; keep the cap at most %d so the store has descriptors left (or raise ulimit -n)", l.maxConns, files, room)
	}
	if l.maxConnsPerClient == 0 || l.maxConnsPerClient > l.maxConns {
		l.maxConnsPerClient = l.maxConns
	}
	return nil
}

// httpServer returns serve's HTTP server over handler, with its
// timeouts, and ln wrapped to hold the connection caps.
func (l *serveLimits) httpServer(ln net.Listener, handler http.Handler, log *slog.Logger) (*http.Server, net.Listener) {
	cl := server.NewConnLimiter(server.ConnLimits{Max: l.maxConns, PerClient: l.maxConnsPerClient, Logger: log})
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: min(defaultReadHeaderTimeout, l.readTimeout),
		ReadTimeout:       l.readTimeout,
		WriteTimeout:      l.writeTimeout,
		IdleTimeout:       l.idleTimeout,
		ConnState:         cl.ConnState,
	}
	return hs, cl.Listener(ln)
}

// handlerSwitch serves whichever handler was set last: serve answers
// with server.Starting while its store opens, then with the API.
type handlerSwitch struct{ h atomic.Pointer[http.Handler] }

func (s *handlerSwitch) set(h http.Handler) { s.h.Store(&h) }

func (s *handlerSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// minStoreFree is the free space under which a file store's filesystem
// counts as full for /readyz: a WAL object, a checkpoint chunk or a
// lease write would fail soon if not already.
const minStoreFree = 1 << 20

// storeSpace reports a file store whose filesystem is (nearly) full;
// nil for other stores and when the free space cannot be read.
// Cost: one statfs(2), no store request.
func storeSpace(url string) error {
	dir, ok := strings.CutPrefix(url, "file://")
	if !ok {
		return nil
	}
	free, err := freeBytes(dir)
	if err != nil || free >= minStoreFree {
		return nil
	}
	return fmt.Errorf("the store's filesystem (%s) is full: %d bytes free", dir, free)
}

// openingReady is /readyz while serve opens its store: why it is not
// ready yet.
func openingReady(url string, since time.Time) func(context.Context) error {
	return func(context.Context) error {
		msg := fmt.Sprintf("opening the store %s (for %v so far)", url, time.Since(since).Truncate(time.Second))
		if err := storeSpace(url); err != nil {
			msg += ": " + err.Error()
		}
		return fmt.Errorf("%s", msg)
	}
}
