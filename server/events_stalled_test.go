package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/server"
)

// smallSendBuffers makes every accepted connection's kernel send buffer
// small (which also turns off its autotuning), so a client that stops
// reading fills it within kilobytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestStalledEventStreamIsDropped: a client that opens the stream of
// every run over a real socket and then stops reading loses its stream
// once a write has waited Config.StreamWriteTimeout (the connection's
// buffers full of keep-alives), instead of holding the server's
// goroutine and connection until it goes.
func TestStalledEventStreamIsDropped(t *testing.T) {
	f := newFixture(t, func(c *server.Config) {
		c.Heartbeat = time.Millisecond // fills the buffers quickly
		c.StreamWriteTimeout = 50 * time.Millisecond
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(f.srv.Handler())
	hs.Listener.Close()
	hs.Listener = smallSendBuffers{ln}
	hs.Start()
	defer hs.Close()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /v1/events HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", ln.Addr())
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || status != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("the stream answered %q, %v", status, err)
	}
	// The stream subscribed before it wrote its header, so it is open
	// (or already dropped) now. The client reads nothing more.
	waitUntil(t, f, "the server dropping the stalled stream", func() bool { return f.srv.EventStreamsOfEveryRun() == 0 })
}
