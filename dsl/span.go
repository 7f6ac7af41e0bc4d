package dsl

import (
	"strings"
	"unicode/utf8"
)

// Columns everywhere in this package count Unicode code points (runes)
// from 1, as go.yaml.in/yaml/v3 reports them. An end position is
// exclusive: the column just past the last character of the range.

// lineIndex gives the text of each line of a source, by 1-based number.
type lineIndex struct {
	lines []string // without their line breaks
}

func newLineIndex(src []byte) *lineIndex {
	s := string(src)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return &lineIndex{lines: lines}
}

// line returns line n (1-based), or "" past the end.
func (li *lineIndex) line(n int) string {
	if n < 1 || n > len(li.lines) {
		return ""
	}
	return li.lines[n-1]
}

// runeCol returns the byte offset in line of 1-based rune column col.
func runeCol(line string, col int) int {
	off := 0
	for c := 1; c < col && off < len(line); c++ {
		_, w := utf8.DecodeRuneInString(line[off:])
		off += w
	}
	return off
}

// colOf returns the 1-based rune column of byte offset off in line.
func colOf(line string, off int) int {
	return utf8.RuneCountInString(line[:min(off, len(line))]) + 1
}

// tokenEnd returns the exclusive end of the YAML token that starts at p:
// a quoted scalar up to its closing quote (on any line), a flow
// collection up to its closing bracket, a plain scalar or key up to the
// ": " that ends a key, a " #" comment or the line's end (in a flow
// collection also a "," or closing bracket). For a block scalar indicator
// (| or >) and a "- " it covers the indicator alone. A position past the
// line's end yields an empty range.
func (li *lineIndex) tokenEnd(p Pos) Pos {
	line := li.line(p.Line)
	start := runeCol(line, p.Col)
	if start >= len(line) {
		return p
	}
	switch c := line[start]; c {
	case '"', '\'':
		return li.quotedEnd(p.Line, start, c)
	case '[', '{':
		return li.flowEnd(p.Line, start)
	case '|', '>':
		return Pos{p.Line, p.Col + 1}
	case '-':
		if start+1 == len(line) || line[start+1] == ' ' {
			return Pos{p.Line, p.Col + 1}
		}
	}
	inFlow := flowDepth(line[:start]) > 0
	end := start
	for end < len(line) {
		c := line[end]
		if c == ':' && (end+1 == len(line) || line[end+1] == ' ' || line[end+1] == '\t' || (inFlow && strings.IndexByte(",]}", line[end+1]) >= 0)) {
			break
		}
		if c == '#' && end > start && (line[end-1] == ' ' || line[end-1] == '\t') {
			break
		}
		if inFlow && (c == ',' || c == ']' || c == '}') {
			break
		}
		end++
	}
	for end > start && (line[end-1] == ' ' || line[end-1] == '\t') {
		end--
	}
	if end == start {
		end = start + 1
	}
	return Pos{p.Line, colOf(line, end)}
}

// flowDepth counts the brackets left open in s, ignoring quoted text.
func flowDepth(s string) int {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{':
			depth++
		case (c == ']' || c == '}') && depth > 0:
			depth--
		}
	}
	return depth
}

// quotedEnd finds the closing quote of a scalar opened at byte start of
// line n; an unterminated one ends with its first line.
func (li *lineIndex) quotedEnd(n, start int, q byte) Pos {
	i := start + 1
	for ln := n; ln <= len(li.lines); ln++ {
		line := li.line(ln)
		for ; i < len(line); i++ {
			c := line[i]
			if q == '"' && c == '\\' {
				i++
				continue
			}
			if c == q {
				if q == '\'' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					continue
				}
				return Pos{ln, colOf(line, i+1)}
			}
		}
		i = 0
	}
	first := li.line(n)
	return Pos{n, colOf(first, len(first))}
}

// flowEnd finds the bracket closing a flow collection opened at byte
// start of line n, skipping quoted text; an unclosed one ends with its
// first line.
func (li *lineIndex) flowEnd(n, start int) Pos {
	depth := 0
	var quote byte
	i := start
	for ln := n; ln <= len(li.lines); ln++ {
		line := li.line(ln)
		for ; i < len(line); i++ {
			c := line[i]
			switch {
			case quote == '"' && c == '\\':
				i++
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case c == '"' || c == '\'':
				quote = c
			case c == '#' && i > 0 && line[i-1] == ' ':
				i = len(line) // a comment ends the line
			case c == '[' || c == '{':
				depth++
			case c == ']' || c == '}':
				depth--
				if depth == 0 {
					return Pos{ln, colOf(line, i+1)}
				}
			}
		}
		i = 0
	}
	first := li.line(n)
	return Pos{n, colOf(first, len(first))}
}

// setEnds gives every diagnostic the end of the token at its position.
func setEnds(src []byte, ds Diagnostics) {
	if len(ds) == 0 {
		return
	}
	li := newLineIndex(src)
	for i := range ds {
		d := &ds[i]
		if d.EndLine != 0 {
			continue
		}
		end := li.tokenEnd(Pos{d.Line, d.Col})
		d.EndLine, d.EndCol = end.Line, end.Col
	}
}
