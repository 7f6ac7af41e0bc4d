package runstate

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestValidateRunIDEchoesSafely checks that a refused run id and its bad
// character are shown escaped: valid UTF-8 in the message, no control
// byte, and no byte shown as the Latin-1 character of its value.
func TestValidateRunIDEchoesSafely(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"caf\xc3\xa9", `"café": character 'é' not allowed`},
		{"bad\xffid", `"bad\xffid": byte 0xff (not UTF-8) not allowed`},
		{"r\xc3", `"r\xc3": byte 0xc3 (not UTF-8) not allowed`},
		{"a\x1b[31mred", `"a\x1b[31mred": character '\x1b' not allowed`},
		{"new\nline", `"new\nline": character '\n' not allowed`},
		{"a b", `"a b": character ' ' not allowed`},
		{"real\uFFFDchar", "\"real\uFFFDchar\": character '\uFFFD' not allowed"},
	} {
		err := ValidateRunID(c.id)
		if !errors.Is(err, ErrInvalidRunID) {
			t.Fatalf("ValidateRunID(%q) = %v, want ErrInvalidRunID", c.id, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("ValidateRunID(%q) = %s\nwant it to contain %s", c.id, msg, c.want)
		}
		if !utf8.ValidString(msg) || strings.ContainsAny(msg, "\x1b\n\u00c3\u00ff") {
			t.Errorf("ValidateRunID(%q): the message is not safe to print: %q", c.id, msg)
		}
	}
	if err := ValidateRunID("01J-ok_run.1:a@b=c+d"); err != nil {
		t.Fatal(err)
	}
}
