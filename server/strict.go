package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// strictJSONError is a request body strictJSON refuses.
type strictJSONError struct {
	// Pointer is the JSON pointer (RFC 6901) of the value at fault, ""
	// for the body as a whole.
	Pointer string
	err     error
}

func (e *strictJSONError) Error() string { return e.err.Error() }

// topField is the member of the body the error lies in ("" for the body
// as a whole), the field of a 400.
func (e *strictJSONError) topField() string {
	if e.Pointer == "" {
		return ""
	}
	for tok := range jsontext.Pointer(e.Pointer).Tokens() {
		return tok
	}
	return ""
}

// strictJSON checks that b is exactly one JSON value of I-JSON (RFC 7493):
// valid UTF-8 throughout, no object naming a member twice (at any depth),
// nothing after the value. encoding/json accepts both (the last duplicate
// wins, bad bytes become U+FFFD), so a body could mean one thing to a proxy
// or validator and another to the server. Every JSON body the API reads
// passes here first.
func strictJSON(b []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	if _, err := dec.ReadValue(); err != nil {
		var se *jsontext.SyntacticError
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return &strictJSONError{err: errors.New("the JSON value is empty or cut short")}
		case errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName):
			at := se.JSONPointer.Parent()
			where := "the top-level object"
			if at != "" {
				where = string(at)
			}
			return &strictJSONError{Pointer: string(se.JSONPointer),
				err: fmt.Errorf("the key %q appears twice in %s; give each key once", se.JSONPointer.LastToken(), where)}
		case errors.As(err, &se):
			msg := se.Err.Error()
			if se.JSONPointer != "" {
				msg += " at " + string(se.JSONPointer)
			}
			return &strictJSONError{Pointer: string(se.JSONPointer), err: fmt.Errorf("not valid JSON: %s (byte %d)", msg, se.ByteOffset)}
		}
		return &strictJSONError{err: fmt.Errorf("not valid JSON: %w", err)}
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &strictJSONError{err: errors.New("data follows the JSON value")}
	}
	return nil
}
