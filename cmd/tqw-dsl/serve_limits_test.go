package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestServeTokenRule: a token shorter than 16 bytes is refused from
// either source with exit 2 and a message naming the source; before,
// a 15-byte TQW_API_TOKEN unlocked listening on 0.0.0.0.
func TestServeTokenRule(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	short := "0123456789abcde" // 15 bytes
	p := c.with(apiTokenEnv+"="+short).start("serve", "--addr", "0.0.0.0:0")
	code, _, errOut := p.wait()
	if code != exitUsage || !strings.Contains(errOut, apiTokenEnv) || !strings.Contains(errOut, "at least 16") {
		t.Fatalf("a 15-byte %s: exit %d, want %d naming the variable:\n%s", apiTokenEnv, code, exitUsage, errOut)
	}
	tok := filepath.Join(c.dir, "tok")
	if err := os.WriteFile(tok, []byte("  "+short+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = c.run("serve", "--addr", "0.0.0.0:0", "--token-file", tok)
	if code != exitUsage || !strings.Contains(errOut, "--token-file") || !strings.Contains(errOut, "at least 16") {
		t.Fatalf("a 15-byte --token-file: exit %d, want %d naming the flag:\n%s", code, exitUsage, errOut)
	}
	// 16 bytes after trimming is enough, from the environment too.
	p = c.with(apiTokenEnv+"= "+short+"f ").start("serve", "--addr", "127.0.0.1:0", "--inbox-poll", "1h")
	p.waitLine("(stop with Ctrl-C)")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code, _, errOut := p.wait(); code != 0 {
		t.Fatalf("a 16-byte token: exit %d\n%s", code, errOut)
	}
}

// dialRaw opens a TCP connection to the server at endpoint (http://...).
func dialRaw(t *testing.T, endpoint string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// awaitClosed reads from conn until the server closes it (EOF or a
// reset) and returns what was read, or an error if it stays open for
// waitDeadline. Safe in any goroutine.
func awaitClosed(conn net.Conn, what string) (string, error) {
	_ = conn.SetReadDeadline(time.Now().Add(waitDeadline))
	var got strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		got.Write(buf[:n])
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return got.String(), fmt.Errorf("%s: the server kept the connection open for %v (read so far: %q)", what, waitDeadline, got.String())
		}
		return got.String(), nil
	}
}

// TestServeCutsSlowBodies: a client without the token that trickles a
// request body, to the API or to a public webhook, has its connection
// cut within the read timeout; before, only the header had a timeout
// and such a body held the connection for good.
func TestServeCutsSlowBodies(t *testing.T) {
	t.Parallel()
	c := newCLI(t).with(apiTokenEnv+"="+serveToken, "GH_SECRET=gh-secret-0123456789")
	hooks := filepath.Join(c.dir, "hooks.yaml")
	if err := os.WriteFile(hooks, []byte("hooks: [{name: gh, workflow: approval.tqw.yaml, hmac: {secret_env: GH_SECRET, header: X-Hub-Signature-256}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, endpoint := startServe(t, c, "--hooks", hooks, "--read-timeout", "1s")
	for _, path := range []string{"/v1/runs", "/v1/hooks/gh"} {
		conn := dialRaw(t, endpoint)
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", path, strings.TrimPrefix(endpoint, "http://")); err != nil {
			t.Fatal(err)
		}
		// The client's pace: a byte now and then, far slower than the
		// body's length needs; it stops when the server cuts it.
		stop := make(chan struct{})
		trickled := make(chan struct{})
		go func() {
			defer close(trickled)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}
		}()
		got, err := awaitClosed(conn, "a trickled body to "+path)
		close(stop)
		<-trickled
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: cut after %q", path, got)
	}
}

// TestServeClosesIdleConnections: keep-alive connections idle past
// --idle-timeout are closed by the server; before, they stayed open for
// good (300 idle connections, all still open after 45 s).
func TestServeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, endpoint := startServe(t, c, "--idle-timeout", "1s")
	const n = 20
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialRaw(t, endpoint)
		if _, err := fmt.Fprintf(conns[i], "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", strings.TrimPrefix(endpoint, "http://")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conns[i]), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET /healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
	}
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := awaitClosed(conn, fmt.Sprintf("idle connection %d", i))
			switch {
			case err != nil:
				t.Error(err)
			case got != "":
				t.Errorf("idle connection %d: the server sent %q before closing it", i, got)
			}
		}()
	}
	wg.Wait()
}

// connHelperEnv makes the test binary a client that holds idle
// connections (TestServeManyIdleConnections): the test process alone may
// not open 20,000 files.
const connHelperEnv = "TQW_TEST_CONN_HELPER"

func init() {
	if spec := os.Getenv(connHelperEnv); spec != "" {
		os.Exit(connHelper(spec))
	}
}

// connHelper opens count connections to addr from the loopback source
// addresses 127.0.0.first.. (one per client), half of them after one
// GET /healthz (idle keep-alive), half sending nothing, prints
// "held N", then waits for stdin to close and prints what the server
// did to them: "closed C refused R" (R: answered 503
// too_many_connections).
func connHelper(spec string) int {
	var addr string
	var count, first, clients int
	if _, err := fmt.Sscanf(spec, "%s %d %d %d", &addr, &count, &first, &clients); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	var closed, refused atomic.Int64
	var wg sync.WaitGroup
	conns := make([]net.Conn, 0, count)
	for i := range count {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(first+i%clients/250), byte(1+i%clients%250))}}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		conns = append(conns, conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_, _ = fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
			}
			b, _ := io.ReadAll(conn)
			closed.Add(1)
			if strings.Contains(string(b), "too_many_connections") {
				refused.Add(1)
			}
		}()
	}
	fmt.Println("held", len(conns))
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Println("closed", closed.Load(), "refused", refused.Load())
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	return 0
}

// openFiles counts the files process pid has open.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestServeManyIdleConnections: 20,000 idle or half-sent connections
// from 320 clients (loopback addresses) against a serve capped at 1,000: it sheds the oldest
// (and refuses what it cannot hold, with a 503 naming the cause), never
// holds more descriptors than the cap allows, keeps answering /healthz,
// and acknowledges a submission that is then in the store. Before, the
// 19,960 connections of the issue exhausted serve's descriptors and the
// store's writes failed.
func TestServeManyIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 connections: not in -short")
	}
	const (
		total, helpers, clients = 20000, 4, 80
		maxConns                = 1000
	)
	c := newCLI(t)
	p, endpoint := startServe(t, c, "--max-conns", strconv.Itoa(maxConns), "--max-conns-per-client", "200", "--idle-timeout", "1h", "--read-timeout", "1h")
	addr := strings.TrimPrefix(endpoint, "http://")
	type helper struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	var hs []helper
	for k := range helpers {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", connHelperEnv, addr, total/helpers, 2+k, clients))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		hs = append(hs, helper{cmd, stdin, bufio.NewScanner(stdout)})
	}
	for _, h := range hs {
		if !h.out.Scan() || !strings.HasPrefix(h.out.Text(), "held ") {
			t.Fatalf("a client helper: %q %v", h.out.Text(), h.out.Err())
		}
	}
	// serve holds at most the cap (plus its own files): the store keeps
	// its descriptors.
	if n := openFiles(t, p.cmd.Process.Pid); n > maxConns+fdReserve {
		t.Errorf("serve holds %d files with a cap of %d connections", n, maxConns)
	} else {
		t.Logf("serve holds %d files under %d connections (cap %d)", n, total, maxConns)
	}
	hc := &http.Client{Timeout: waitDeadline, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		resp, err := hc.Get(endpoint + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz %d under 20,000 connections: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz %d: %d", i, resp.StatusCode)
		}
	}
	resp, err := hc.Post(endpoint+"/v1/runs", "application/json", strings.NewReader(`{"workflow":"approval.tqw.yaml","run_id":"under-flood","input":{"request":"r"}}`))
	if err != nil {
		t.Fatalf("a submission under 20,000 connections: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("a submission under 20,000 connections: %d %s", resp.StatusCode, body)
	}
	var closed, refused int
	for _, h := range hs {
		h.stdin.Close()
		if !h.out.Scan() {
			t.Fatalf("a client helper: %v", h.out.Err())
		}
		var cl, rf int
		if _, err := fmt.Sscanf(h.out.Text(), "closed %d refused %d", &cl, &rf); err != nil {
			t.Fatalf("a client helper: %q: %v", h.out.Text(), err)
		}
		closed, refused = closed+cl, refused+rf
	}
	t.Logf("of %d connections serve closed %d before the clients did, %d of them answered 503", total, closed, refused)
	if closed < total-maxConns {
		t.Errorf("serve closed %d of %d connections; holding more than its cap of %d", closed, total, maxConns)
	}
	if !strings.Contains(p.stderr(), "connection limits reached") {
		t.Errorf("serve did not say it shed connections:\n%s", p.stderr())
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code, _, errOut := p.wait(); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, errOut)
	}
	// Acknowledged means in the store.
	out, _ := c.must(0, "status", "under-flood", "--json")
	if !strings.Contains(out, `"state":"waiting"`) {
		t.Fatalf("the acknowledged run: %s", out)
	}
}

// mountSmallDisk mounts a tmpfs of size at a fresh folder and unmounts
// it when the test ends; it skips the test where mounting is not
// permitted.
func mountSmallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("a full disk needs a small tmpfs, and mounting one is not permitted here (run as root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes zeros into dir/fill until the filesystem is full.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Smaller writes take what the big ones left.
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
}

// readyz returns /readyz's status and reason.
func readyz(t *testing.T, hc *http.Client, endpoint string) (int, string) {
	t.Helper()
	resp, err := hc.Get(endpoint + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	var r struct {
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return resp.StatusCode, r.Reason
}

// TestServeOnAFullDisk: with its file store on a full disk, serve's
// /readyz says why it is not ready, a submission answers 503 with
// Retry-After within --durable-timeout instead of hanging, a serve
// started on the full disk answers /healthz and /readyz while its store
// cannot open, and once space is freed every acknowledged run is there.
// Before, /readyz stayed 200, the POST hung, and a serve started on the
// full disk answered nothing.
func TestServeOnAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs: not in -short")
	}
	disk := mountSmallDisk(t, "16m")
	c := newCLI(t)
	c.store = "file://" + filepath.Join(disk, "store")
	hc := &http.Client{Timeout: waitDeadline}
	submit := func(endpoint, runID string) (*http.Response, string) {
		t.Helper()
		resp, err := hc.Post(endpoint+"/v1/runs", "application/json",
			strings.NewReader(fmt.Sprintf(`{"workflow":"approval.tqw.yaml","run_id":%q,"input":{"request":"r"}}`, runID)))
		if err != nil {
			t.Fatalf("POST /v1/runs %s: %v", runID, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	p, endpoint := startServe(t, c, "--durable-timeout", "2s")
	if resp, body := submit(endpoint, "before-full"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a submission: %d %s", resp.StatusCode, body)
	}
	fillDisk(t, disk)
	if code, reason := readyz(t, hc, endpoint); code != http.StatusServiceUnavailable || !strings.Contains(reason, "full") && !strings.Contains(reason, "no space left") {
		t.Errorf("/readyz on a full disk: %d %q; want 503 saying the store's filesystem is full", code, reason)
	}
	// The packed log may still hold space it took before the disk filled:
	// commits that fit there are durable and acknowledged. Submit until
	// one needs space the disk no longer has.
	acked := []string{"before-full"}
	refused := false
	for i := 0; i < 2000 && !refused; i++ {
		id := fmt.Sprintf("during-full-%d", i)
		resp, body := submit(endpoint, id)
		switch {
		case resp.StatusCode == http.StatusCreated:
			acked = append(acked, id)
		case resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"unavailable"`):
			t.Fatalf("a submission on a full disk: %d (Retry-After %q) %s; want 201 or 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		default:
			refused = true
		}
	}
	if !refused {
		t.Fatalf("%d submissions on a full disk were all acknowledged", len(acked))
	}
	// The log's write now fails over and over, which /readyz reports.
	if code, reason := readyz(t, hc, endpoint); code != http.StatusServiceUnavailable || !strings.Contains(reason, "no space left") {
		t.Errorf("/readyz with the log's writes failing: %d %q; want 503 with the store's error", code, reason)
	}
	p.kill9()

	// A serve started on the full disk answers the probes.
	p = c.start("serve", "--addr", "127.0.0.1:0", "--workflows", filepath.Join(c.dir, "wf"), "--inbox-poll", "1h")
	p.waitLine("listening on")
	m := regexp.MustCompile(`listening on (http://[0-9.:]+),`).FindStringSubmatch(p.stderr())
	if m == nil {
		t.Fatalf("no address in %s", p.stderr())
	}
	endpoint = m[1]
	resp, err := hc.Get(endpoint + "/healthz")
	if err != nil {
		t.Fatalf("/healthz of a serve started on a full disk: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz of a serve started on a full disk: %d", resp.StatusCode)
	}
	if code, reason := readyz(t, hc, endpoint); code != http.StatusServiceUnavailable || !strings.Contains(reason, "full") {
		t.Errorf("/readyz of a serve started on a full disk: %d %q; want 503 saying the filesystem is full", code, reason)
	}
	if resp, body := submit(endpoint, "while-opening"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a submission while the store opens: %d %s; want 503 with Retry-After", resp.StatusCode, body)
	}

	// Space again: the store opens and every acknowledged run is there.
	if err := os.Remove(filepath.Join(disk, "fill")); err != nil {
		t.Fatal(err)
	}
	p.waitLine("(stop with Ctrl-C)")
	if code, reason := readyz(t, hc, endpoint); code != http.StatusOK {
		t.Errorf("/readyz once space is freed: %d %q", code, reason)
	}
	for _, id := range acked {
		resp, err = hc.Get(endpoint + "/v1/runs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"state":"waiting"`) {
			t.Fatalf("run %s, acknowledged before the store refused writes: %d %s", id, resp.StatusCode, b)
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code, _, errOut := p.wait(); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, errOut)
	}
}

// TestServeEventStreamsOutliveTheTimeouts: an event stream keeps going
// past --read-timeout and --write-timeout (it sends a keep-alive each
// heartbeat, a second); without the stream's exemption the read
// deadline ended its request's context and the write deadline its
// writes.
func TestServeEventStreamsOutliveTheTimeouts(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, endpoint := startServe(t, c, "--read-timeout", "1s", "--write-timeout", "1s")
	resp, err := http.Get(endpoint + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	keepAlives := 0
	for keepAlives < 4 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), ": keep-alive") {
			keepAlives++
		}
	}
	if keepAlives < 4 {
		t.Fatalf("the stream ended after %d keep-alives (%v); want it to outlive the 1s timeouts", keepAlives, sc.Err())
	}
}
