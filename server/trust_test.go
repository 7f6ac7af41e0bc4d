package server_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// TestInlineRefusedWithoutAllowInline: a server without AllowInline
// answers an inline workflow 403 inline_disabled; by name still works.
func TestInlineRefusedWithoutAllowInline(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.AllowInline = false })
	_, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: "tqw: v1\nname: x\nsteps:\n  - id: a\n    succeed: ok\n"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusForbidden || ce.Code != "inline_disabled" {
		t.Fatalf("inline: %v", err)
	}
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "greet.yaml", Input: []byte(`{"name":"a"}`)}); err != nil {
		t.Fatalf("by name: %v", err)
	}
}

// TestSecretNotAllowed: an inline workflow that declares a secret neither
// named by the operator nor declared by a file of the folder is refused
// (403 secret_not_allowed); one the folder declares is not.
func TestSecretNotAllowed(t *testing.T) {
	f := newFixture(t)
	src := "tqw: v1\nname: x\nsecrets: [%s]\nsteps:\n  - id: a\n    succeed: ok\n"
	_, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: fmt.Sprintf(src, "SERVER_TEST_UNDECLARED")})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusForbidden || ce.Code != "secret_not_allowed" {
		t.Fatalf("an undeclared secret: %v", err)
	}
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: fmt.Sprintf(src, "SERVER_TEST_SECRET")}); err != nil {
		t.Fatalf("a secret the folder declares: %v", err)
	}
}
