package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/server"
)

// limitedServer serves /ok at once and /busy until release is closed
// (each /busy sends on started first), behind a ConnLimiter.
func limitedServer(t *testing.T, lim server.ConnLimits) (addr string, started chan struct{}, release chan struct{}, cl *server.ConnLimiter) {
	t.Helper()
	started, release = make(chan struct{}, 16), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/busy", func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl = server.NewConnLimiter(lim)
	hs := &http.Server{Handler: mux, ConnState: cl.ConnState, ReadHeaderTimeout: time.Minute}
	go func() { _ = hs.Serve(cl.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String(), started, release, cl
}

// awaitSheddable waits until cl counts n sheddable connections (the
// http.Server reports a connection idle only after its answer went out).
func awaitSheddable(t *testing.T, cl *server.ConnLimiter, n int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	stop := time.After(deadline)
	for cl.Stats().Sheddable != n {
		select {
		case <-tick.C:
		case <-stop:
			t.Fatalf("%d sheddable connections, want %d", cl.Stats().Sheddable, n)
		}
	}
}

// rawConn is one raw keep-alive connection.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(deadline))
	return &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *rawConn) send(path string) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads one response: status and body, or the read error.
func (c *rawConn) answer() (int, string, error) {
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (c *rawConn) get(path string) (int, string) {
	c.t.Helper()
	c.send(path)
	code, body, err := c.answer()
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return code, body
}

// closedByServer reports whether the server closed the connection.
func (c *rawConn) closedByServer() bool {
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnLimiterRefusesAClientOverItsCap: a client holding its cap is
// answered 503 too_many_connections at once; another client is not.
func TestConnLimiterRefusesAClientOverItsCap(t *testing.T) {
	t.Parallel()
	addr, _, _, _ := limitedServer(t, server.ConnLimits{PerClient: 2})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, c := range []*rawConn{a, b} {
		if code, _ := c.get("/ok"); code != http.StatusOK {
			t.Fatalf("within the cap: %d", code)
		}
	}
	code, body := dialRaw(t, addr).get("/ok")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "too_many_connections") || !strings.Contains(body, "127.0.0.1") {
		t.Fatalf("a third connection of one client: %d %s; want 503 too_many_connections naming the client", code, body)
	}
	// Its held connections still serve.
	if code, _ := a.get("/ok"); code != http.StatusOK {
		t.Fatalf("a held connection after the refusal: %d", code)
	}
	// Another client (127.0.0.2 is loopback too on Linux) is not refused.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no second loopback address to dial from: %v", err)
	}
	defer conn.Close()
	other := &rawConn{t: t, conn: conn, r: bufio.NewReader(conn)}
	_ = conn.SetDeadline(time.Now().Add(deadline))
	if code, body := other.get("/ok"); code != http.StatusOK {
		t.Fatalf("another client: %d %s", code, body)
	}
}

// TestConnLimiterShedsTheOldestIdle: at the total cap a new connection
// closes the connection idle longest, and the others keep serving.
func TestConnLimiterShedsTheOldestIdle(t *testing.T) {
	t.Parallel()
	addr, _, _, cl := limitedServer(t, server.ConnLimits{Max: 2})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	a.get("/ok")
	awaitSheddable(t, cl, 2) // a idle, b new
	b.get("/ok")             // idle after a
	awaitSheddable(t, cl, 2)
	c := dialRaw(t, addr)
	if code, _ := c.get("/ok"); code != http.StatusOK {
		t.Fatalf("a connection at the cap: %d; want the oldest idle shed for it", code)
	}
	if !a.closedByServer() {
		t.Fatal("the connection idle longest was not shed")
	}
	if code, _ := b.get("/ok"); code != http.StatusOK {
		t.Fatalf("the other idle connection: %d", code)
	}
}

// TestConnLimiterShedsConnectionsWithoutARequest: a connection that
// sent no complete request header is sheddable too.
func TestConnLimiterShedsConnectionsWithoutARequest(t *testing.T) {
	t.Parallel()
	addr, started, release, cl := limitedServer(t, server.ConnLimits{Max: 2})
	defer close(release)
	busy := dialRaw(t, addr)
	busy.send("/busy")
	<-started
	half := dialRaw(t, addr)
	if _, err := io.WriteString(half.conn, "GET /ok HTTP/1.1\r\nHo"); err != nil {
		t.Fatal(err)
	}
	awaitSheddable(t, cl, 1)
	if code, _ := dialRaw(t, addr).get("/ok"); code != http.StatusOK {
		t.Fatalf("a connection at the cap: %d; want the half-sent one shed", code)
	}
	if !half.closedByServer() {
		t.Fatal("the half-sent connection was not shed")
	}
}

// TestConnLimiterNeverShedsBusyConnections: when every held connection
// is serving a request, a new one is refused with a 503 and the
// requests under way finish.
func TestConnLimiterNeverShedsBusyConnections(t *testing.T) {
	t.Parallel()
	addr, started, release, _ := limitedServer(t, server.ConnLimits{Max: 2})
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	a.send("/busy")
	b.send("/busy")
	<-started
	<-started
	code, body := dialRaw(t, addr).get("/ok")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "too_many_connections") {
		t.Fatalf("a connection while all are busy: %d %s; want 503 too_many_connections", code, body)
	}
	close(release)
	for _, c := range []*rawConn{a, b} {
		if code, body, err := c.answer(); err != nil || code != http.StatusOK || body != "done" {
			t.Fatalf("a busy request: %d %q %v; want it finished", code, body, err)
		}
	}
}
