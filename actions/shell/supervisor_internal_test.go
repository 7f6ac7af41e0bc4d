package shell

import (
	"strings"
	"testing"
)

// FuzzParseReports reads arbitrary supervisor reports: no panic, an exit
// code only from a well-formed final report, and always in 0..255.
func FuzzParseReports(f *testing.F) {
	for _, s := range []string{"exit 0\n", "signal 9\n", "exit 3\nexit 4\n", "starterr fork/exec /x: exec format error\n",
		"fail reading the command's environment: unexpected EOF\n", "exit 300\n", "signal 0\n", "exit -1\n", "bogus\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, ended, err := parseReports(data)
		if err != nil {
			if ended || o.startErr != "" {
				t.Fatalf("error %v with a result %+v, ended %v", err, o, ended)
			}
			return
		}
		if ended && (o.code < 0 || o.code > 255) {
			t.Fatalf("exit code %d out of range from %q", o.code, data)
		}
		if ended && !strings.Contains(string(data), "exit ") && !strings.Contains(string(data), "signal ") {
			t.Fatalf("ended without a final report in %q", data)
		}
	})
}
