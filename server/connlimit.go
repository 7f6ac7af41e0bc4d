package server

import (
	"container/list"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimits bounds the connections a server holds open, so that no
// client (nor all of them together) can take the file descriptors the
// store needs.
type ConnLimits struct {
	// Max is the most connections held at once, every client together;
	// 0 means no cap. At the cap a new connection first sheds the
	// connection that has been idle (between requests) or waiting for a
	// complete request header longest; it is refused only when every
	// held connection is busy with a request.
	Max int
	// PerClient is the most connections one remote IP address holds at
	// once; 0 means no cap. A client at its cap is refused at once.
	PerClient int
	// Logger receives a warning when connections are refused or shed
	// (at most one a second, with counts); nil discards.
	Logger *slog.Logger
}

// ConnStats counts what a ConnLimiter did.
type ConnStats struct {
	// Open is the connections held now.
	Open int
	// Sheddable is how many of them are idle or have not sent a
	// complete request header.
	Sheddable int
	// Refused counts connections closed at once with a 503 (a client
	// over its cap, or every held connection busy).
	Refused int64
	// Shed counts idle or incomplete connections closed to make room.
	Shed int64
}

// ConnLimiter enforces ConnLimits on the connections of one
// http.Server: wrap its listener with Listener and set
// http.Server.ConnState to its ConnState method. It tracks every
// connection from accept to close; a connection is sheddable while
// http.Server reports it new (no complete request header yet) or idle,
// and busy while a request is being served.
type ConnLimiter struct {
	lim ConnLimits
	log *slog.Logger

	mu    sync.Mutex
	open  int
	perIP map[netip.Addr]int
	// sheddable holds the new and idle connections, the one that became
	// so longest ago in front.
	sheddable list.List

	lingering chan struct{} // a slot per refused connection being read

	refused, shed atomic.Int64
	lastWarn      atomic.Int64 // unix nanoseconds of the last warning
	warnedAt      [2]int64     // refused, shed at the last warning
}

// NewConnLimiter returns a limiter enforcing lim.
func NewConnLimiter(lim ConnLimits) *ConnLimiter {
	log := lim.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ConnLimiter{lim: lim, log: log, perIP: map[netip.Addr]int{}, lingering: make(chan struct{}, maxLingering)}
}

// Stats reports the connections held and what was refused or shed.
func (l *ConnLimiter) Stats() ConnStats {
	l.mu.Lock()
	open, sheddable := l.open, l.sheddable.Len()
	l.mu.Unlock()
	return ConnStats{Open: open, Sheddable: sheddable, Refused: l.refused.Load(), Shed: l.shed.Load()}
}

// Listener wraps ln so that every connection it accepts counts against
// the limits; a connection over them is answered 503 and closed before
// the http.Server sees it.
func (l *ConnLimiter) Listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, l: l}
}

type limitedListener struct {
	net.Listener
	l *ConnLimiter
}

func (ln *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := ln.l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// limitedConn is a connection the limiter counts until it is closed.
type limitedConn struct {
	net.Conn
	l  *ConnLimiter
	ip netip.Addr
	// Under l.mu: elem is its place in l.sheddable (nil while busy or
	// released); released says it no longer counts.
	elem     *list.Element
	released bool
}

// Close stops counting the connection and closes it.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *ConnLimiter) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	if c.elem != nil {
		l.sheddable.Remove(c.elem)
		c.elem = nil
	}
	l.open--
	if n := l.perIP[c.ip] - 1; n > 0 {
		l.perIP[c.ip] = n
	} else {
		delete(l.perIP, c.ip)
	}
}

// remoteIP is the client address a connection counts against.
func remoteIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// admit counts c, shedding the oldest sheddable connection when at the
// cap, or refuses it (answered and closed, nil returned).
func (l *ConnLimiter) admit(c net.Conn) *limitedConn {
	ip := remoteIP(c)
	l.mu.Lock()
	if l.lim.PerClient > 0 && l.perIP[ip] >= l.lim.PerClient {
		l.mu.Unlock()
		l.refuse(c, fmt.Sprintf("this client (%s) holds %d connections, the most this server allows one client; reuse or close them", ip, l.lim.PerClient))
		return nil
	}
	var victim *limitedConn
	if l.lim.Max > 0 && l.open >= l.lim.Max {
		front := l.sheddable.Front()
		if front == nil {
			l.mu.Unlock()
			l.refuse(c, fmt.Sprintf("the server holds %d connections, its cap, each serving a request; retry shortly", l.lim.Max))
			return nil
		}
		victim = front.Value.(*limitedConn)
		l.releaseLocked(victim)
	}
	lc := &limitedConn{Conn: c, l: l, ip: ip}
	lc.elem = l.sheddable.PushBack(lc)
	l.open++
	l.perIP[ip]++
	l.mu.Unlock()
	if victim != nil {
		// The http.Server's read on it fails and it cleans up; an idle
		// keep-alive client opens a new connection for its next request.
		_ = victim.Conn.Close()
		l.shed.Add(1)
		l.warn()
	}
	return lc
}

// refusal is written to a refused connection before it is closed: the
// client's request gets a clear answer rather than a reset.
const refusalFormat = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"

func (l *ConnLimiter) refuse(c net.Conn, why string) {
	l.refused.Add(1)
	body := fmt.Sprintf(`{"error":{"code":"too_many_connections","message":%q}}`+"\n", why)
	// A fresh socket's send buffer takes the answer at once; the
	// deadline only guards against a kernel that says otherwise.
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, refusalFormat, len(body), body)
	l.warn()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = c.Close()
		return
	}
	_ = tc.CloseWrite()
	// Closing with the client's request unread would reset the
	// connection, and the client might lose the answer: read what it
	// sent first, briefly, on a bounded number of connections (a flood
	// must not hold descriptors this way).
	select {
	case l.lingering <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.lingering }()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		_ = c.Close()
	}()
}

// maxLingering bounds the refused connections read before closing.
const maxLingering = 64

// warn logs what was refused and shed since the last warning, at most
// once a second.
func (l *ConnLimiter) warn() {
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(time.Second) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	st := l.Stats()
	l.mu.Lock()
	refused, shed := st.Refused-l.warnedAt[0], st.Shed-l.warnedAt[1]
	l.warnedAt = [2]int64{st.Refused, st.Shed}
	l.mu.Unlock()
	l.log.Warn("connection limits reached: refusing and shedding connections",
		"refused", refused, "shed", shed, "open", st.Open, "max", l.lim.Max, "per_client", l.lim.PerClient)
}

// ConnState is the http.Server.ConnState hook that tells the limiter
// which connections are busy.
func (l *ConnLimiter) ConnState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.released {
		return
	}
	switch st {
	case http.StateIdle:
		// Idle from now: to the back of the line.
		if lc.elem != nil {
			l.sheddable.Remove(lc.elem)
		}
		lc.elem = l.sheddable.PushBack(lc)
	case http.StateActive, http.StateHijacked:
		if lc.elem != nil {
			l.sheddable.Remove(lc.elem)
			lc.elem = nil
		}
	case http.StateClosed:
		l.releaseLocked(lc)
	}
}
