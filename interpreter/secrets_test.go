package interpreter

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

func TestCheckSecretsRefusesShortValues(t *testing.T) {
	e := newTestEnv(t)
	e.write("child.yaml", `
tqw: v1
name: child
secrets: [CHILD_KEY]
steps:
  - id: done
    succeed: ok
`)
	p := e.write("parent.yaml", `
tqw: v1
name: parent
secrets: [TOKEN, EMPTY]
steps:
  - id: kid
    call: {workflow: ./child.yaml}
`)
	w := e.load(p)
	env := map[string]string{"TOKEN": "12345678", "EMPTY": "", "CHILD_KEY": "1234567"}
	err := w.CheckSecrets(func(k string) string { return env[k] })
	var short *SecretTooShortError
	if !errors.Is(err, ErrSecretTooShort) || !errors.As(err, &short) || short.Name != "CHILD_KEY" || short.Workflow != "child" || short.Len != 7 {
		t.Fatalf("CheckSecrets: %v; want CHILD_KEY of child refused", err)
	}
	if msg := err.Error(); strings.Contains(msg, "1234567") || !strings.Contains(msg, fmt.Sprint(MinSecretLength)) {
		t.Fatalf("message %q must name the minimum and never the value", msg)
	}
	env["CHILD_KEY"] = "12345678"
	if err := w.CheckSecrets(func(k string) string { return env[k] }); err != nil {
		t.Fatalf("secrets of the minimum length, and an empty one, are accepted: %v", err)
	}
}

// TestShortSecretInWorkerFailsTheRun: a worker whose environment holds a
// short value fails the run before its first step sends anything, instead
// of redacting "1" out of "count=10".
func TestShortSecretInWorkerFailsTheRun(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprint(w, "count=10")
	}))
	defer ts.Close()
	e := newTestEnv(t, withEnv("TOKEN", "1"))
	p := e.write("short.yaml", `
tqw: v1
name: short
secrets: [TOKEN]
steps:
  - id: get
    action: http
    with: {url: "`+ts.URL+`", headers: {X-Token: "${ secrets.TOKEN }"}}
`)
	o := e.run(p, map[string]any{}, "r1")
	wantFailedWith(t, o, "validation: secret TOKEN (declared by workflow short) is 1 bytes long; a secret must be at least 8 bytes")
	if calls.Load() != 0 {
		t.Fatalf("%d requests sent with a refused secret", calls.Load())
	}
}

// TestEncodedSecretsAreRedacted sends a secret in a query, a path, a header
// and as Basic credentials (URL user info and an Authorization header) to
// a server that echoes the request in every form, and checks that no
// encoding of the secret is in the stored state.
func TestEncodedSecretsAreRedacted(t *testing.T) {
	const secret = `p@ss w/rd+"<&>\é`
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		echo := map[string]any{"uri": r.RequestURI, "query": r.URL.RawQuery, "path": r.URL.EscapedPath(),
			"auth": r.Header.Get("Authorization"), "header": r.Header.Get("X-Token"), "user": user, "pass": pass,
			"b64": base64.StdEncoding.EncodeToString([]byte(r.Header.Get("X-Token")))}
		if r.URL.Query().Get("text") != "" {
			b, _ := json.Marshal(echo)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(b) // JSON escapes, kept as text
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echo)
	}))
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	// URL user info takes the secret as written, so that one is URL-safe.
	const userSecret = "url-user-secret"
	e := newTestEnv(t, withEnv("TOKEN", secret), withEnv("USER_TOKEN", userSecret))
	p := e.write("echo.yaml", `
tqw: v1
name: echo
secrets: [TOKEN, USER_TOKEN]
steps:
  - id: query
    action: http
    with: {url: "`+ts.URL+`/q", query: {token: "${ secrets.TOKEN }", text: "1"}}
  - id: path_and_header
    action: http
    with: {url: "`+ts.URL+`/p/${ secrets.TOKEN }", headers: {X-Token: "${ secrets.TOKEN }"}}
  - id: basic_header
    action: http
    with: {url: "`+ts.URL+`/b", headers: {Authorization: "Basic ${ toBase64('alice:' + secrets.TOKEN) }"}}
  - id: basic_url
    foreach:
      items: [1, 2]
      action: http
      with: {url: "http://${ secrets.USER_TOKEN }:pw@`+u.Host+`/u"}
    set: {auth: "${ output[0].body.auth }"}
  - id: done
    succeed: {auth: "${ vars.auth }", out: "${ steps.basic_header.output.body }"}
`)
	o := e.run(p, map[string]any{}, "r1")
	wantSucceeded(t, o, `{"auth":"Basic ***","out":{"auth":"Basic ***","b64":"","header":"","pass":"***","path":"/b","query":"","uri":"/b","user":"alice"}}`)
	forms := formsOf(secret)
	forms["basic alice"] = base64.StdEncoding.EncodeToString([]byte("alice:" + secret))
	for name, f := range formsOf(userSecret) {
		forms["user "+name] = f
	}
	forms["basic url"] = base64.StdEncoding.EncodeToString([]byte(userSecret + ":pw"))
	for key, b := range allObjects(t, context.Background(), e.store) {
		for name, f := range forms {
			if bytes.Contains(b, []byte(f)) {
				t.Errorf("object %s holds the %s form %q of the secret", key, name, f)
			}
		}
	}
	h := e.history("r1")
	hb, _ := json.Marshal(h)
	for name, f := range forms {
		if bytes.Contains(hb, []byte(f)) {
			t.Errorf("history holds the %s form %q", name, f)
		}
	}
	if !bytes.Contains(hb, []byte(`token=***`)) || !bytes.Contains(hb, []byte(`/p/***`)) {
		t.Errorf("history lacks the redacted echoes:\n%s", hb)
	}
}
