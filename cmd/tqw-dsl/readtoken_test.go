package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// With a serve holding the store behind a token, status, list and
// history from a process without that token read the store (anyone who
// can read it may) instead of failing with "refused the API token".
func TestReadOnlyVerbsReadTheStoreWhenTheAPIRefusesTheToken(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, apiTokenEnv+"="+serveToken)
	wf := filepath.Join(c.dir, "wf", "approval.tqw.yaml")
	startServe(t, c)
	c.must(0, "submit", wf, "--input", `{"request":"disk"}`, "--run-id", "r1")
	c.awaitState("r1", "waiting")
	for _, other := range []*cli{c.with(apiTokenEnv + "=wrong-token-0123456789"), c.with(apiTokenEnv + "=")} {
		for _, args := range [][]string{{"status", "r1"}, {"list"}, {"history", "r1"}} {
			code, out, errOut := other.run(args...)
			if code != exitOK || !strings.Contains(out, "r1") && !strings.Contains(out, "approve") || strings.Contains(errOut, "refused the API token") {
				t.Errorf("%v without the token: exit %d\n%s%s", args, code, out, errOut)
			}
		}
	}
}
