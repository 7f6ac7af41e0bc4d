package dsl

import (
	"errors"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// InstancePointer returns the JSON pointer (RFC 6901) of the part of a
// validated value that a JSON Schema validation error in err's chain is
// about: the first innermost cause's location, and for a missing
// required property the property's own pointer ("/approved"). "" is the
// whole value. ok is false when err holds no validation error.
func InstancePointer(err error) (pointer string, ok bool) {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "", false
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	loc := ve.InstanceLocation
	if req, isReq := ve.ErrorKind.(*kind.Required); isReq && len(req.Missing) > 0 {
		loc = append(append([]string(nil), loc...), req.Missing[0])
	}
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	return b.String(), true
}
