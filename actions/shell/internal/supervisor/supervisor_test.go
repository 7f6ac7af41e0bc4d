package supervisor

import (
	"bufio"
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestEnvRoundTrip(t *testing.T) {
	for _, env := range [][]string{nil, {"PATH=/bin"}, {"A=", "B=x=y", "C=multi\nline", "D=" + strings.Repeat("z", 1<<17)}} {
		got, err := ReadEnv(bufio.NewReader(bytes.NewReader(AppendEnv(nil, env))))
		if err != nil || !slices.Equal(got, env) {
			t.Fatalf("ReadEnv(AppendEnv(%q)) = %q, %v", env, got, err)
		}
	}
	// Cut short: an error, not a partial environment.
	full := AppendEnv(nil, []string{"A=1", "B=2"})
	for n := range len(full) {
		if got, err := ReadEnv(bufio.NewReader(bytes.NewReader(full[:n]))); err == nil {
			t.Fatalf("%d of %d bytes: read %q without an error", n, len(full), got)
		}
	}
}

// FuzzReadEnv decodes arbitrary lifeline bytes: no panic, and what decodes
// encodes back to the bytes it was read from.
func FuzzReadEnv(f *testing.F) {
	f.Add(AppendEnv(nil, []string{"PATH=/usr/bin", "HOME=/root"}))
	f.Add([]byte{0})
	f.Add([]byte("A=1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ReadEnv(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		if enc := AppendEnv(nil, env); !bytes.HasPrefix(data, enc) {
			t.Fatalf("ReadEnv(%q) = %q, which encodes to %q", data, env, enc)
		}
	})
}
