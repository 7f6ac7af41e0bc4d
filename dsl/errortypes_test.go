package dsl

import (
	"slices"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	actionhttp "github.com/tqw-dsl/tqw/actions/http"
	"github.com/tqw-dsl/tqw/actions/llm"
)

// TestErrorTypesCoverActions keeps ErrorTypes in step with the types the
// built-in actions raise: a workflow must be able to name each one in
// retry.on and catch.on.
func TestErrorTypesCoverActions(t *testing.T) {
	for _, typ := range []string{
		actions.TypeTimeout, actions.TypeHTTP4xx, actions.TypeHTTP5xx, actions.TypeHTTPConnection,
		actions.TypeLLMRateLimit, actions.TypeLLMInvalidOutput, actions.TypeShellExit,
		actions.TypeValidation, actions.TypeCancelled,
		actionhttp.TypeResponseTooLarge, actionhttp.TypeInvalidBody, actionhttp.TypeUnexpectedStatus,
		llm.TypeMemo,
	} {
		if !slices.Contains(ErrorTypes, typ) {
			t.Errorf("ErrorTypes lacks %q, which a built-in action raises", typ)
		}
	}
}

// TestRetryDefaults checks which errors a retry policy without on retries:
// those the action marked retryable, and by type alone the documented set.
func TestRetryDefaults(t *testing.T) {
	p := &RetryPolicy{MaxAttempts: 3}
	for typ, want := range map[string]bool{
		"timeout": true, "http.status_5xx": true, "http.connection": true, "llm.rate_limit": true, "memo": true,
		"http.status_4xx": false, "http.unexpected_status": false, "http.response_too_large": false,
		"http.invalid_body": false, "llm.invalid_output": false, "shell.exit": false, "signal.timeout": false,
		"call.failed": false, "expression": false, "validation": false, "cancelled": false, "custom.quota": false,
	} {
		if got := p.RetriesType(typ); got != want {
			t.Errorf("RetriesType(%q) = %v; want %v", typ, got, want)
		}
	}
	for status, want := range map[int]bool{0: false, 404: false, 408: true, 409: false, 429: true} {
		if got := RetryableByDefault("http.status_4xx", status); got != want {
			t.Errorf("RetryableByDefault(http.status_4xx, %d) = %v; want %v", status, got, want)
		}
	}
	if !p.Retries(&ErrorInfo{Type: "custom.quota", Retryable: true}) || p.Retries(&ErrorInfo{Type: "http.connection"}) {
		t.Error("without on, Retries must follow the action's verdict")
	}
	on := &RetryPolicy{MaxAttempts: 3, On: []string{"shell.exit"}}
	if !on.Retries(&ErrorInfo{Type: "shell.exit"}) || on.Retries(&ErrorInfo{Type: "timeout", Retryable: true}) {
		t.Error("with on, Retries must follow the list")
	}
}

// TestActionErrorTypesLoad names every action error type in retry.on and
// catch.on, and reads error.retryable, in a file that must load.
func TestActionErrorTypesLoad(t *testing.T) {
	src := `tqw: v1
name: t
steps:
  - id: a
    action: http
    with: {url: "https://example.com", timeout: 5s, max_response_bytes: 1024}
    retry: {max_attempts: 3, on: [http.response_too_large, http.invalid_body, http.unexpected_status, memo], when: error.retryable}
    catch:
      - on: [http.response_too_large, http.invalid_body, http.unexpected_status, memo]
        when: "!error.retryable"
        next: a
`
	w, diags, err := Parse("t.yaml", []byte(src))
	if err != nil || len(diags) != 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	if got := w.Steps[0].Retry.On; len(got) != 4 || got[3] != "memo" {
		t.Errorf("retry.on = %v", got)
	}
	_, diags, _ = Parse("t.yaml", []byte("tqw: v1\nname: t\nsteps:\n  - {id: a, action: sleep, with: {duration: 1s}, retry: {on: [http.response_to_large]}}\n"))
	if len(diags) != 1 || diags[0].Code != CodeErrorType || !strings.Contains(diags[0].Hint, `did you mean "http.response_too_large"`) {
		t.Errorf("want one %s with a hint, got:\n%s", CodeErrorType, diags)
	}
}
