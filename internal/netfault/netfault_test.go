package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					_, _ = c.Write(append(sc.Bytes(), '\n'))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestDownCutsAndUpRestores(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got, err := roundTrip(p.Addr(), "hi"); err != nil || got != "hi\n" {
		t.Fatalf("before Down: %q, %v", got, err)
	}
	// A connection open across Down is cut.
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("open connection before Down: %v", err)
	}
	p.Down()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatal("a connection open across Down still answers")
	}
	if got, err := roundTrip(p.Addr(), "hi"); err == nil {
		t.Fatalf("while down: got %q", got)
	}
	p.Up()
	if got, err := roundTrip(p.Addr(), "back"); err != nil || got != "back\n" {
		t.Fatalf("after Up: %q, %v", got, err)
	}
}
