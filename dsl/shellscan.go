package dsl

import "strings"

// shellCtx is where, in the shell grammar, a ${ } piece of a script sits:
// it decides how the piece's environment variable is referenced. Every
// reference is a parameter expansion, whose result a POSIX shell never
// parses as code; the context only decides the quoting around it.
type shellCtx uint8

const (
	ctxWord    shellCtx = iota // unquoted: "${V}", one word
	ctxDouble                  // inside "...": ${V}, the quotes already keep it one word
	ctxSingle                  // inside '...': '"${V}"' closes the quote, expands, reopens
	ctxHeredoc                 // an unquoted here-document body: ${V}
	ctxComment                 // after #: ${V}, never run
	// The contexts below cannot hold a value safely; validate rejects them.
	ctxEscaped       // right after a backslash
	ctxDollarSingle  // inside $'...'
	ctxParam         // inside a shell ${...} expansion (written $${...})
	ctxArith         // inside $(( )) or (( )): the shell evaluates the value as an expression
	ctxQuotedHeredoc // a here-document body with a quoted delimiter, where nothing expands
	ctxHeredocDelim  // the delimiter word of a here-document
	ctxBacktickQuote // inside `...` within double quotes, whose quoting shells disagree on
)

// safe reports whether a value can be referenced in c.
func (c shellCtx) safe() bool { return c <= ctxComment }

// ref returns the text that references variable name in c.
func (c shellCtx) ref(name string) string {
	switch c {
	case ctxWord:
		return `"${` + name + `}"`
	case ctxSingle:
		return `'"${` + name + `}"'`
	}
	return "${" + name + "}"
}

// problem says, for an unsafe context, where the piece is and what to do.
func (c shellCtx) problem() (where, hint string) {
	switch c {
	case ctxEscaped:
		return "right after a backslash, which would escape the quoting tqw adds", "remove the backslash"
	case ctxDollarSingle:
		return "inside $'...', where a variable cannot expand", "move it out of the $'...' string, e.g. $'\\t'\"${ x }\""
	case ctxParam:
		return "inside a shell parameter expansion $${...}", "put the value in a variable first: env: {NAME: \"${ ... }\"}, then use $${NAME:-...} in the script"
	case ctxArith:
		return "inside shell arithmetic, where the shell evaluates the value as an expression (bash runs $(...) found there)", "compute the number in the expression instead, e.g. ${ vars.n + 1 }, outside the $(( ))"
	case ctxQuotedHeredoc:
		return "inside a here-document whose delimiter is quoted, where nothing expands", "unquote the delimiter (<<EOF instead of <<'EOF') or pass the value in env"
	case ctxHeredocDelim:
		return "in the delimiter of a here-document", "write the delimiter literally"
	case ctxBacktickQuote:
		return "inside `...` within double quotes, whose quoting shells do not agree on", "write $( ) instead of backticks"
	}
	return "in an unsupported place", "pass the value in env and read \"$NAME\""
}

// Frame kinds of the scanner.
const (
	fCmd          = iota // the script's top level
	fSub                 // $( ... )
	fBacktick            // ` ... `
	fDouble              // " ... "
	fSingle              // ' ... '
	fDollarSingle        // $' ... '
	fParam               // ${ ... }
	fArith               // $(( ... )) and (( ... ))
	fHeredoc             // an unquoted here-document body
)

type heredoc struct {
	delim  string
	strip  bool // <<-: leading tabs are stripped
	quoted bool
}

type frame struct {
	kind     int
	depth    int  // open ( in fSub and fArith
	atStart  bool // command frames: the next byte starts a word
	inDouble bool // fBacktick: inside double quotes
	pending  []heredoc
	// fHeredoc
	doc       heredoc
	rest      []heredoc
	lineStart bool
}

func (f *frame) command() bool { return f.kind == fCmd || f.kind == fSub || f.kind == fBacktick }

// shellScanner finds the context of each piece of a script. text holds
// the script with one placeholder byte per piece, at the offsets in
// pieces (ascending); a piece counts as a word character. It follows the
// POSIX token rules for quotes, backslashes, comments, expansions and
// here-documents; where a script outruns it (a case pattern's ")" inside
// $( ), say) a guessed context can only change the quoting of a
// reference, never make a value code.
type shellScanner struct {
	text   string
	pieces []int
	next   int // index in pieces of the next piece
	ctxs   []shellCtx
	stack  []frame
}

func scanScript(text string, pieces []int) []shellCtx {
	s := &shellScanner{text: text, pieces: pieces, ctxs: make([]shellCtx, len(pieces)),
		stack: []frame{{kind: fCmd, atStart: true}}}
	s.run()
	return s.ctxs
}

func (s *shellScanner) isPiece(i int) bool {
	return s.next < len(s.pieces) && s.pieces[s.next] == i
}

// mark records the context of the piece at the current offset.
func (s *shellScanner) mark(c shellCtx) {
	s.ctxs[s.next] = c
	s.next++
}

// markRange gives every piece in [i, j) context c.
func (s *shellScanner) markRange(i, j int, c shellCtx) {
	for s.next < len(s.pieces) && s.pieces[s.next] < j {
		if s.pieces[s.next] >= i {
			s.ctxs[s.next] = c
		}
		s.next++
	}
}

func (s *shellScanner) top() *frame { return &s.stack[len(s.stack)-1] }

func (s *shellScanner) push(f frame) {
	if t := s.top(); t.command() {
		t.atStart = false
	}
	s.stack = append(s.stack, f)
}

func (s *shellScanner) pop() {
	if len(s.stack) > 1 {
		s.stack = s.stack[:len(s.stack)-1]
	}
}

func (s *shellScanner) at(i int) byte {
	if i < len(s.text) {
		return s.text[i]
	}
	return 0
}

// inDouble reports whether the innermost quoting around the top is double
// quotes (a backtick started there inherits them).
func (s *shellScanner) inDouble() bool {
	for i := len(s.stack) - 1; i >= 0; i-- {
		switch s.stack[i].kind {
		case fDouble:
			return true
		case fCmd, fSub, fHeredoc:
			return false
		case fBacktick:
			return s.stack[i].inDouble
		}
	}
	return false
}

func (s *shellScanner) run() {
	for i := 0; i < len(s.text); {
		i = s.step(i)
	}
	// Pieces after an unterminated construct keep the context they had.
	for s.next < len(s.pieces) {
		s.mark(ctxWord)
	}
}

// step consumes what starts at i and returns the next offset.
func (s *shellScanner) step(i int) int {
	f := s.top()
	c := s.text[i]
	switch f.kind {
	case fSingle:
		if s.isPiece(i) {
			s.mark(ctxSingle)
		} else if c == '\'' {
			s.pop()
		}
		return i + 1
	case fDollarSingle:
		switch {
		case s.isPiece(i):
			s.mark(ctxDollarSingle)
		case c == '\\':
			if s.isPiece(i + 1) {
				s.next++
				s.ctxs[s.next-1] = ctxDollarSingle
			}
			return i + 2
		case c == '\'':
			s.pop()
		}
		return i + 1
	case fDouble:
		switch {
		case s.isPiece(i):
			s.mark(ctxDouble)
		case c == '"':
			s.pop()
		case c == '\\':
			return s.backslash(i)
		case c == '$':
			return s.dollar(i, false)
		case c == '`':
			s.push(frame{kind: fBacktick, atStart: true, inDouble: true})
		}
		return i + 1
	case fParam:
		switch {
		case s.isPiece(i):
			s.mark(ctxParam)
		case c == '}':
			s.pop()
		case c == '\\':
			return s.backslash(i)
		case c == '$':
			return s.dollar(i, false)
		case c == '"':
			s.push(frame{kind: fDouble})
		case c == '\'' && !s.inDouble():
			s.push(frame{kind: fSingle})
		case c == '`':
			s.push(frame{kind: fBacktick, atStart: true, inDouble: s.inDouble()})
		}
		return i + 1
	case fArith:
		switch {
		case s.isPiece(i):
			s.mark(ctxArith)
		case c == '(':
			f.depth++
		case c == ')':
			if f.depth == 0 && s.at(i+1) == ')' {
				s.pop()
				return i + 2
			}
			f.depth = max(f.depth-1, 0)
		case c == '$':
			return s.dollar(i, false)
		}
		return i + 1
	case fHeredoc:
		return s.heredocStep(i)
	}
	return s.commandStep(i)
}

// commandStep handles a byte in fCmd, fSub or fBacktick.
func (s *shellScanner) commandStep(i int) int {
	f := s.top()
	c := s.text[i]
	start := f.atStart
	f.atStart = false
	switch {
	case s.isPiece(i):
		if f.kind == fBacktick && s.inDouble() {
			s.mark(ctxBacktickQuote)
		} else {
			s.mark(ctxWord)
		}
	case c == '\'':
		s.push(frame{kind: fSingle})
	case c == '"':
		s.push(frame{kind: fDouble})
	case c == '\\':
		return s.backslash(i)
	case c == '$':
		return s.dollar(i, true)
	case c == '`':
		if f.kind == fBacktick {
			s.pop()
		} else {
			s.push(frame{kind: fBacktick, atStart: true})
		}
	case c == '#' && start:
		end := strings.IndexByte(s.text[i:], '\n')
		if end < 0 {
			end = len(s.text)
		} else {
			end += i
		}
		s.markRange(i, end, ctxComment)
		f.atStart = true
		return end
	case c == '(' && start && s.at(i+1) == '(':
		s.push(frame{kind: fArith})
		return i + 2
	case c == '<' && s.at(i+1) == '<':
		if s.at(i+2) == '<' { // bash here-string: the next word is an ordinary word
			f.atStart = true
			return i + 3
		}
		return s.heredocOperator(i + 2)
	case c == '\n':
		f.atStart = true
		if len(f.pending) > 0 {
			docs := f.pending
			f.pending = nil
			return s.startHeredocs(i+1, docs)
		}
	case f.kind == fSub && c == '(':
		f.depth++
		f.atStart = true
	case f.kind == fSub && c == ')':
		if f.depth == 0 {
			s.pop()
			return i + 1
		}
		f.depth--
	default:
		f.atStart = strings.IndexByte(" \t;&|()<>", c) >= 0
	}
	return i + 1
}

// backslash handles a backslash at i: it quotes the next byte, so a piece
// there would lose the quoting tqw adds around its reference.
func (s *shellScanner) backslash(i int) int {
	if s.isPiece(i + 1) {
		s.next++
		s.ctxs[s.next-1] = ctxEscaped
	}
	return i + 2
}

// dollar handles a $ at i; unquoted tells whether $'...' and $"..." are
// quotes there.
func (s *shellScanner) dollar(i int, unquoted bool) int {
	switch s.at(i + 1) {
	case '(':
		if s.at(i+2) == '(' {
			s.push(frame{kind: fArith})
			return i + 3
		}
		s.push(frame{kind: fSub, atStart: true})
		return i + 2
	case '{':
		s.push(frame{kind: fParam})
		return i + 2
	case '\'':
		if unquoted {
			s.push(frame{kind: fDollarSingle})
			return i + 2
		}
	case '"':
		if unquoted {
			s.push(frame{kind: fDouble})
			return i + 2
		}
	}
	return i + 1
}

// heredocOperator reads the delimiter word after << (i is just past it)
// and queues the here-document for the end of the line.
func (s *shellScanner) heredocOperator(i int) int {
	var h heredoc
	if s.at(i) == '-' {
		h.strip = true
		i++
	}
	for s.at(i) == ' ' || s.at(i) == '\t' {
		i++
	}
	var delim strings.Builder
	start := i
	for i < len(s.text) && strings.IndexByte(" \t\n;&|<>()", s.text[i]) < 0 {
		switch c := s.text[i]; c {
		case '\'', '"':
			h.quoted = true
			end := i + 1
			for end < len(s.text) && s.text[end] != c {
				if c == '"' && s.text[end] == '\\' {
					end++
				}
				end++
			}
			delim.WriteString(strings.ReplaceAll(s.text[i+1:min(end, len(s.text))], "\\", ""))
			i = end + 1
		case '\\':
			h.quoted = true
			if i+1 < len(s.text) {
				delim.WriteByte(s.text[i+1])
			}
			i += 2
		default:
			delim.WriteByte(c)
			i++
		}
	}
	i = min(i, len(s.text))
	s.markRange(start, i, ctxHeredocDelim)
	h.delim = delim.String()
	f := s.top()
	f.pending = append(f.pending, h)
	return i
}

// startHeredocs reads the bodies of docs, in order, from i (the start of
// the line after their operators).
func (s *shellScanner) startHeredocs(i int, docs []heredoc) int {
	for len(docs) > 0 {
		h := docs[0]
		docs = docs[1:]
		if !h.quoted {
			s.stack = append(s.stack, frame{kind: fHeredoc, doc: h, rest: docs, lineStart: true})
			return i
		}
		for i < len(s.text) {
			line, next := s.line(i)
			if s.isDelimiter(line, h) {
				i = next
				break
			}
			s.markRange(i, next, ctxQuotedHeredoc)
			i = next
		}
	}
	return i
}

// line returns the line starting at i, without its newline, and the
// offset after the newline.
func (s *shellScanner) line(i int) (string, int) {
	end := strings.IndexByte(s.text[i:], '\n')
	if end < 0 {
		return s.text[i:], len(s.text)
	}
	return s.text[i : i+end], i + end + 1
}

func (s *shellScanner) isDelimiter(line string, h heredoc) bool {
	if h.strip {
		line = strings.TrimLeft(line, "\t")
	}
	return line == h.delim
}

// heredocStep handles a byte of an unquoted here-document body, where
// quotes are literal but expansions and backslashes work as in double
// quotes.
func (s *shellScanner) heredocStep(i int) int {
	f := s.top()
	if f.lineStart {
		f.lineStart = false
		if line, next := s.line(i); s.isDelimiter(line, f.doc) && !strings.Contains(line, "\x00") {
			rest := f.rest
			s.pop()
			return s.startHeredocs(next, rest)
		}
	}
	c := s.text[i]
	switch {
	case s.isPiece(i):
		s.mark(ctxHeredoc)
	case c == '\n':
		f.lineStart = true
	case c == '\\':
		return s.backslash(i)
	case c == '$':
		return s.dollar(i, false)
	case c == '`':
		s.push(frame{kind: fBacktick, atStart: true})
	}
	return i + 1
}
