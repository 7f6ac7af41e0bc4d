package lsp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/tqw-dsl/tqw/internal/tqwdslbin"
)

// binary is tqw-dsl, built once for the tests that start it.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tqw-lsp-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if binary, err = tqwdslbin.Path(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitTimeout bounds every wait for the server; generous, since the
// machine is shared.
const waitTimeout = 30 * time.Second

// client speaks LSP to one `tqw-dsl lsp` process.
type client struct {
	t    *testing.T
	cmd  *exec.Cmd
	conn *jsonrpc2.Conn

	mu    sync.Mutex
	diags map[string][]publishedDiagnostics // by URI, in arrival order
	cond  chan struct{}                     // closed and replaced on each publication
}

type publishedDiagnostics struct {
	URI         string       `json:"uri"`
	Version     *int         `json:"version"`
	Diagnostics []diagnostic `json:"diagnostics"`
}

type position struct {
	Line      int `json:"line"`
	Character int `json:"character"`
}

type lspRange struct {
	Start position `json:"start"`
	End   position `json:"end"`
}

type location struct {
	URI   string   `json:"uri"`
	Range lspRange `json:"range"`
}

type diagnostic struct {
	Range              lspRange `json:"range"`
	Severity           int      `json:"severity"`
	Code               code     `json:"code"`
	Source             string   `json:"source"`
	Message            string   `json:"message"`
	RelatedInformation []struct {
		Location location `json:"location"`
		Message  string   `json:"message"`
	} `json:"relatedInformation"`
}

type rwc struct {
	io.ReadCloser
	io.WriteCloser
}

func (c rwc) Close() error {
	c.WriteCloser.Close()
	return c.ReadCloser.Close()
}

// startServer starts tqw-dsl lsp and initializes it, offering the given
// position encodings (none: the protocol's UTF-16).
func startServer(t *testing.T, encodings ...string) *client {
	t.Helper()
	cmd := exec.Command(binary, "lsp", "--debounce", "0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer // shown when the test fails
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, cmd: cmd, diags: map[string][]publishedDiagnostics{}, cond: make(chan struct{})}
	stream := jsonrpc2.NewBufferedStream(rwc{stdout, stdin}, jsonrpc2.VSCodeObjectCodec{})
	c.conn = jsonrpc2.NewConn(context.Background(), stream, jsonrpc2.HandlerWithError(c.handle))
	t.Cleanup(func() {
		c.conn.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("tqw-dsl lsp stderr:\n%s", stderr.String())
		}
	})
	caps := map[string]any{}
	if len(encodings) > 0 {
		caps["general"] = map[string]any{"positionEncodings": encodings}
	}
	var res struct {
		Capabilities struct {
			PositionEncoding string `json:"positionEncoding"`
		} `json:"capabilities"`
	}
	c.call("initialize", map[string]any{"processId": os.Getpid(), "rootUri": nil, "capabilities": caps}, &res)
	want := "utf-16"
	if len(encodings) > 0 {
		want = encodings[0]
	}
	if res.Capabilities.PositionEncoding != want {
		t.Fatalf("positionEncoding %q; want %q", res.Capabilities.PositionEncoding, want)
	}
	c.notify("initialized", map[string]any{})
	return c
}

func (c *client) handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	if req.Method == "textDocument/publishDiagnostics" && req.Params != nil {
		var p publishedDiagnostics
		if err := json.Unmarshal(*req.Params, &p); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.diags[p.URI] = append(c.diags[p.URI], p)
		close(c.cond)
		c.cond = make(chan struct{})
		c.mu.Unlock()
	}
	return nil, nil
}

func (c *client) call(method string, params, result any) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.conn.Call(ctx, method, params, result); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
}

// callErr is call for a request expected to fail.
func (c *client) callErr(method string, params any) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var res json.RawMessage
	return c.conn.Call(ctx, method, params, &res)
}

func (c *client) notify(method string, params any) {
	c.t.Helper()
	if err := c.conn.Notify(context.Background(), method, params); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
}

func fileURI(path string) string {
	abs, _ := filepath.Abs(path)
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
}

// open sends didOpen for a document.
func (c *client) open(uri, text string) {
	c.notify("textDocument/didOpen", map[string]any{"textDocument": map[string]any{
		"uri": uri, "languageId": "yaml", "version": 1, "text": text}})
}

// diagnosticsFor waits for the diagnostics of uri at version.
func (c *client) diagnosticsFor(uri string, version int) []diagnostic {
	c.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		c.mu.Lock()
		for _, p := range c.diags[uri] {
			if p.Version != nil && *p.Version == version {
				c.mu.Unlock()
				return p.Diagnostics
			}
		}
		wait := c.cond
		c.mu.Unlock()
		select {
		case <-wait:
		case <-deadline:
			c.t.Fatalf("no diagnostics for %s version %d within %v", uri, version, waitTimeout)
		}
	}
}

func docPos(uri string, line, char int) map[string]any {
	return map[string]any{"textDocument": map[string]any{"uri": uri}, "position": map[string]any{"line": line, "character": char}}
}

// firstDiagnostics waits for the first diagnostics published for uri,
// for servers that send no version.
func (c *client) firstDiagnostics(uri string) []diagnostic {
	c.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		c.mu.Lock()
		if ps := c.diags[uri]; len(ps) > 0 {
			c.mu.Unlock()
			return ps[0].Diagnostics
		}
		wait := c.cond
		c.mu.Unlock()
		select {
		case <-wait:
		case <-deadline:
			c.t.Fatalf("no diagnostics for %s within %v", uri, waitTimeout)
		}
	}
}

// code is a diagnostic code, which the protocol allows to be a string or
// a number (yaml-language-server sends numbers).
type code string

func (c *code) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = code(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*c = code(n.String())
	return nil
}

// lockedBuffer is a bytes.Buffer safe for the process's writes and the
// test's read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
