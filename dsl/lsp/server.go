package lsp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
)

// DefaultDebounce is how long the server waits after the last change to
// a document before it loads it and publishes its diagnostics.
const DefaultDebounce = 150 * time.Millisecond

// Options tune a Server.
type Options struct {
	// Debounce is the quiet time before diagnostics are recomputed;
	// zero means DefaultDebounce, a negative value no wait.
	Debounce time.Duration
	// Logger receives the server's own problems; nil discards them.
	Logger *slog.Logger
	// Version is reported to the client in serverInfo.
	Version string
	// LoadOptions returns the loader options a document at path is
	// checked with (a program's declared actions); nil means dsl.Options{}.
	LoadOptions func(path string) dsl.Options
	// AfterFunc schedules f after d and returns a function that cancels
	// it; nil means time.AfterFunc. Tests use it to drive the debounce.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// ErrExitWithoutShutdown is returned by Serve when the client sent exit
// before shutdown, which the protocol makes an error exit.
var ErrExitWithoutShutdown = errors.New("lsp: exit before shutdown")

// Serve runs a language server on the stream (the editor's stdin and
// stdout for `tqw-dsl lsp`) until the client sends exit or the stream
// ends. It returns nil after shutdown then exit, and
// ErrExitWithoutShutdown or the stream's error otherwise.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AfterFunc == nil {
		opts.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	s := &Server{opts: opts, docs: map[string]*document{}, enc: encUTF16, exit: make(chan struct{})}
	stream := jsonrpc2.NewBufferedStream(stdio{in, out}, jsonrpc2.VSCodeObjectCodec{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn := jsonrpc2.NewConn(ctx, stream, jsonrpc2.HandlerWithError(s.handle),
		jsonrpc2.SetLogger(slogPrinter{opts.Logger}))
	select {
	case <-conn.DisconnectNotify():
	case <-s.exit:
		conn.Close()
	case <-ctx.Done():
		conn.Close()
		return ctx.Err()
	}
	s.stopTimers()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.exited && s.shutdown:
		return nil
	case s.exited:
		return ErrExitWithoutShutdown
	}
	return fmt.Errorf("lsp: the client closed the connection without exit")
}

// stdio joins the two halves of the editor's pipe.
type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }

type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Printf(format string, v ...any) {
	p.l.Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// Server is one language server session. Requests are handled one at a
// time, in the order they arrive, so a completion always sees the edits
// sent before it.
type Server struct {
	opts Options
	exit chan struct{}

	mu sync.Mutex
	// conn is the connection, known from the first message: NewConn
	// starts handling before it returns.
	conn     *jsonrpc2.Conn
	docs     map[string]*document
	enc      encoding
	shutdown bool
	exited   bool
}

// document is an open file.
type document struct {
	uri     string
	path    string // the file name diagnostics carry
	text    string
	lines   []string
	version int
	// outline is the last one the text yielded; a text being edited
	// that is not YAML keeps the previous one.
	outline *dsl.Outline
	diags   dsl.Diagnostics // the last ones published
	stop    func() bool     // cancels the pending diagnostics run
	gen     int             // changes so far; a diagnostics run for an older one is dropped
}

// handle answers one message. A panic (a server bug) becomes an error
// answer for that request instead of ending the editor's session.
func (s *Server) handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) (result any, err error) {
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			s.opts.Logger.Error("internal error", "method", req.Method, "panic", r)
			result, err = nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: fmt.Sprintf("internal error in %s: %v; please report it with the file", req.Method, r)}
		}
	}()
	return s.dispatch(ctx, req)
}

func (s *Server) dispatch(ctx context.Context, req *jsonrpc2.Request) (any, error) {
	switch req.Method {
	case "initialize":
		var p initializeParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		return s.initialize(p), nil
	case "initialized", "$/setTrace", "$/cancelRequest", "workspace/didChangeConfiguration", "textDocument/didSave":
		return nil, nil
	case "shutdown":
		s.mu.Lock()
		s.shutdown = true
		s.mu.Unlock()
		return nil, nil
	case "exit":
		s.mu.Lock()
		s.exited = true
		s.mu.Unlock()
		close(s.exit)
		return nil, nil
	case "textDocument/didOpen":
		var p didOpenParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		s.open(p)
		return nil, nil
	case "textDocument/didChange":
		var p didChangeParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		return nil, s.change(p)
	case "textDocument/didClose":
		var p didCloseParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		s.close(ctx, p.TextDocument.URI)
		return nil, nil
	}
	if req.Notif {
		return nil, nil
	}
	var tp textDocumentPositionParams
	if err := decodeParams(req.Params, &tp); err != nil {
		return nil, invalidParams(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[tp.TextDocument.URI]
	if d == nil {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("document %s is not open", tp.TextDocument.URI)}
	}
	v := view{d: d, enc: s.enc}
	pos := v.fromLSP(tp.Position)
	if testfile.Is(d.path) {
		var opts dsl.Options
		if s.opts.LoadOptions != nil {
			opts = s.opts.LoadOptions(d.path)
		}
		return v.testRequest(req.Method, pos, opts), nil // testfile.go
	}
	switch req.Method {
	case "textDocument/definition":
		return v.definition(pos), nil
	case "textDocument/references":
		var p referenceParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		return v.references(pos, p.Context.IncludeDeclaration), nil
	case "textDocument/prepareRename":
		return v.prepareRename(pos), nil
	case "textDocument/rename":
		var p renameParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		return v.rename(pos, p.NewName)
	case "textDocument/documentSymbol":
		return v.symbols(), nil
	case "textDocument/completion":
		return v.complete(pos), nil
	case "textDocument/hover":
		return v.hover(pos), nil
	case "textDocument/codeAction":
		var p codeActionParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, invalidParams(err)
		}
		return v.codeActions(v.fromLSP(p.Range.Start), v.fromLSP(p.Range.End)), nil
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not supported: " + req.Method}
}

func invalidParams(err error) error {
	return &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: err.Error()}
}

func (s *Server) initialize(p initializeParams) initializeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	// utf-32 counts code points, the loader's own unit, so it needs no
	// conversion; utf-16 is the protocol's default.
	for _, e := range p.Capabilities.General.PositionEncodings {
		if e == "utf-32" {
			s.enc = encUTF32
			break
		}
		if e == "utf-8" {
			s.enc = encUTF8
		}
	}
	var r initializeResult
	r.ServerInfo.Name = "tqw-dsl"
	r.ServerInfo.Version = s.opts.Version
	r.Capabilities = serverCapabilities{
		PositionEncoding:       s.enc.String(),
		TextDocumentSync:       1, // full text on every change
		CompletionProvider:     completionOptions{TriggerCharacters: []string{".", ":", " ", "["}},
		HoverProvider:          true,
		DefinitionProvider:     true,
		ReferencesProvider:     true,
		RenameProvider:         renameOptions{PrepareProvider: true},
		DocumentSymbolProvider: true,
		CodeActionProvider:     codeActionOptions{CodeActionKinds: []string{"quickfix"}},
	}
	return r
}

func (s *Server) open(p didOpenParams) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &document{uri: p.TextDocument.URI, path: uriPath(p.TextDocument.URI)}
	s.docs[d.uri] = d
	s.setText(d, p.TextDocument.Text, p.TextDocument.Version)
}

func (s *Server) change(p didChangeParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[p.TextDocument.URI]
	if d == nil {
		return &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "didChange for a document that is not open"}
	}
	if len(p.ContentChanges) == 0 {
		return nil
	}
	// The server asks for full sync; the last change holds the whole text.
	last := p.ContentChanges[len(p.ContentChanges)-1]
	if last.Range != nil {
		return &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "incremental change received; the server announced full sync"}
	}
	s.setText(d, last.Text, p.TextDocument.Version)
	return nil
}

// setText replaces d's text and schedules its diagnostics.
func (s *Server) setText(d *document, text string, version int) {
	d.text, d.version = text, version
	d.lines = splitLines(text)
	if o := dsl.ParseOutline([]byte(text)); o != nil {
		d.outline = o
	} else if d.outline == nil {
		d.outline = &dsl.Outline{}
	}
	d.gen++
	gen := d.gen
	if d.stop != nil {
		d.stop()
	}
	delay := max(s.opts.Debounce, 0)
	d.stop = s.opts.AfterFunc(delay, func() { s.publish(d, gen) })
}

// publish loads d's text as it was at generation gen and sends its
// diagnostics, unless the text has changed since.
func (s *Server) publish(d *document, gen int) {
	s.mu.Lock()
	if d.gen != gen || s.docs[d.uri] != d {
		s.mu.Unlock()
		return
	}
	text, path, version := d.text, d.path, d.version
	s.mu.Unlock()
	var opts dsl.Options
	if s.opts.LoadOptions != nil {
		opts = s.opts.LoadOptions(path)
	}
	var diags dsl.Diagnostics
	if testfile.Is(path) {
		diags = testDiagnostics(path, text, opts) // testfile.go
	} else {
		w, d, _ := dsl.ParseWith(path, []byte(text), opts)
		diags = d
		if path != "" {
			diags = append(diags, dsl.CallCycles(path, w, opts)...)
		}
	}
	s.mu.Lock()
	if d.gen != gen || s.docs[d.uri] != d {
		s.mu.Unlock()
		return
	}
	d.diags = diags
	v := view{d: d, enc: s.enc}
	out := make([]Diagnostic, 0, len(diags))
	for _, dg := range diags {
		out = append(out, v.diagnostic(dg))
	}
	conn := s.conn
	s.mu.Unlock()
	ver := version
	err := conn.Notify(context.Background(), "textDocument/publishDiagnostics", publishDiagnosticsParams{URI: d.uri, Version: &ver, Diagnostics: out})
	if err != nil && !errors.Is(err, jsonrpc2.ErrClosed) {
		s.opts.Logger.Warn("publishing diagnostics", "uri", d.uri, "err", err)
	}
}

func (s *Server) close(ctx context.Context, uri string) {
	s.mu.Lock()
	d := s.docs[uri]
	delete(s.docs, uri)
	if d != nil && d.stop != nil {
		d.stop()
	}
	conn := s.conn
	s.mu.Unlock()
	if d != nil {
		// Clear the editor's list: the file is no longer watched.
		_ = conn.Notify(ctx, "textDocument/publishDiagnostics", publishDiagnosticsParams{URI: uri, Diagnostics: []Diagnostic{}})
	}
}

func (s *Server) stopTimers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.docs {
		if d.stop != nil {
			d.stop()
		}
	}
}

// uriPath turns a file URI into the path diagnostics name; another URI
// stays as it is.
func uriPath(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" {
		return uri
	}
	return filepath.FromSlash(u.Path)
}

func splitLines(text string) []string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// encoding is the unit of Position.Character.
type encoding int

const (
	encUTF16 encoding = iota
	encUTF32
	encUTF8
)

func (e encoding) String() string {
	return [...]string{"utf-16", "utf-32", "utf-8"}[e]
}

// units counts s in e's units.
func (e encoding) units(s string) int {
	switch e {
	case encUTF8:
		return len(s)
	case encUTF32:
		return utf8.RuneCountInString(s)
	}
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// view is a document seen in the session's position encoding; it is used
// under the server's lock.
type view struct {
	d   *document
	enc encoding
}

func (v view) line(n int) string { // n is 1-based
	if n < 1 || n > len(v.d.lines) {
		return ""
	}
	return v.d.lines[n-1]
}

// toLSP converts a loader position (1-based line, code point column).
func (v view) toLSP(p dsl.Pos) Position {
	line := v.line(p.Line)
	off := 0
	for c := 1; c < p.Col && off < len(line); c++ {
		_, w := utf8.DecodeRuneInString(line[off:])
		off += w
	}
	return Position{Line: max(p.Line-1, 0), Character: v.enc.units(line[:off])}
}

// fromLSP converts an LSP position to a loader one.
func (v view) fromLSP(p Position) dsl.Pos {
	line := v.line(p.Line + 1)
	off, units := 0, 0
	for off < len(line) && units < p.Character {
		r, w := utf8.DecodeRuneInString(line[off:])
		units += v.enc.units(string(r))
		off += w
	}
	return dsl.Pos{Line: p.Line + 1, Col: utf8.RuneCountInString(line[:off]) + 1}
}

func (v view) rangeOf(s dsl.Span) Range {
	return Range{Start: v.toLSP(s.Start), End: v.toLSP(s.End)}
}

// byteOffset is the offset in its line of a loader position.
func (v view) byteOffset(p dsl.Pos) int {
	line := v.line(p.Line)
	off := 0
	for c := 1; c < p.Col && off < len(line); c++ {
		_, w := utf8.DecodeRuneInString(line[off:])
		off += w
	}
	return off
}

// docsURL is the language reference the diagnostics link to.
const docsURL = "https://github.com/tqw-dsl/tqw/blob/main/docs/DSL.md"

// diagnostic converts a loader diagnostic; its hint becomes related
// information at the same place.
func (v view) diagnostic(d dsl.Diagnostic) Diagnostic {
	sev := severityError
	if d.Severity == dsl.SeverityWarning {
		sev = severityWarning
	}
	r := v.rangeOf(dsl.Span{Start: dsl.Pos{Line: d.Line, Col: d.Col}, End: dsl.Pos{Line: d.EndLine, Col: d.EndCol}})
	out := Diagnostic{Range: r, Severity: sev, Code: d.Code, Source: "tqw", Message: d.Message,
		CodeDescription: &codeDescription{Href: docsURL}}
	if d.Hint != "" {
		out.RelatedInformation = []relatedInformation{{Location: Location{URI: v.d.uri, Range: r}, Message: "hint: " + d.Hint}}
	}
	return out
}
