package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
)

// Secrets of the end-to-end redaction test: every character an encoding
// treats specially. A URL path and URL user info take a secret as written,
// so theirs leave out what would break the URL.
const (
	redactSecret     = `p@ss w/rd+%:="<&>\é€`
	redactPathSecret = `p@ss w/rd+:="<&>\é-path`
	redactUserSecret = "user-secret-42"
	// redactMarker rides beside the secrets: finding it proves the
	// searches look at bytes that hold the echoes.
	redactMarker = "visible-marker-1"
)

const redactWorkflow = `tqw: v1
name: redact-e2e
input:
  type: object
  required: [url, host]
  properties: {url: {type: string}, host: {type: string}}
secrets: [SECRET, PATH_SECRET, USER_SECRET]
steps:
  - id: query
    action: http
    with:
      url: "${ input.url }/q"
      query: {token: "${ secrets.SECRET }", marker: "` + redactMarker + `"}
  - id: query_text
    action: http
    with:
      method: POST
      url: "${ input.url }/t"
      query: {token: "${ secrets.SECRET }", format: text}
      headers: {X-Token: "${ secrets.SECRET }"}
      body: {password: "${ secrets.SECRET }", marker: "` + redactMarker + `"}
  - id: path
    action: http
    with: {url: "${ input.url }/p/${ secrets.PATH_SECRET }/end"}
  - id: header_and_basic
    action: http
    with:
      method: POST
      url: "${ input.url }/h"
      headers:
        X-Token: "${ secrets.SECRET }"
        Authorization: "Basic ${ toBase64('alice:' + secrets.SECRET) }"
      body: "raw ${ secrets.SECRET } text"
    set: {auth: "${ output.body.headers.Authorization[0] }"}
  - id: url_user
    action: http
    with: {url: "http://${ secrets.USER_SECRET }:pw@${ input.host }/u"}
  - id: failing
    action: http
    with:
      url: "${ input.url }/q"
      query: {token: "${ secrets.SECRET }"}
      expect_status: 201
    catch:
      - set: {message: "${ error.message }"}
        next: done
  - id: done
    succeed: {auth: "${ vars.auth }", echoed: "${ steps.query.output.body.raw_query }", message: "${ vars.message }"}
`

// echoServer answers every request with everything it received, raw and
// in base64 (alone and inside longer base64 at every alignment), as JSON,
// or as the same JSON in a text/plain body when format=text.
func echoServer(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		user, pass, _ := r.BasicAuth()
		b64 := map[string]string{}
		for name, v := range map[string]string{"x-token": r.Header.Get("X-Token"), "body": string(body), "user": user, "pass": pass} {
			for i, pre := range []string{"", "a", "ab", "abc"} {
				b := []byte(pre + v + "z")
				b64[fmt.Sprintf("%s.std.%d", name, i)] = base64.StdEncoding.EncodeToString(b)
				b64[fmt.Sprintf("%s.url.%d", name, i)] = base64.RawURLEncoding.EncodeToString(b)
			}
			b64[name+".alone"] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		echo := map[string]any{"uri": r.RequestURI, "raw_query": r.URL.RawQuery, "query": r.URL.Query(),
			"path": r.URL.Path, "escaped_path": r.URL.EscapedPath(), "headers": r.Header, "body": string(body),
			"user": user, "pass": pass, "base64": b64}
		out, err := json.Marshal(echo)
		if err != nil {
			t.Error(err)
		}
		if r.URL.Query().Get("format") == "text" {
			w.Header().Set("Content-Type", "text/plain")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		_, _ = w.Write(out)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// secretForms lists, by name, the encodings of s that must appear nowhere:
// s; URL query, path and user-info escaping, with upper- and lower-case
// hex; JSON string escaping with and without HTML escapes and ASCII-only;
// and the base64 of each of these (standard and URL, padded and raw, and
// the characters of its base64 at each alignment within a longer base64
// text).
func secretForms(s string) map[string]string {
	lower := func(e string) string {
		var sb strings.Builder
		for i := 0; i < len(e); i++ {
			if e[i] == '%' && i+2 < len(e) {
				sb.WriteString("%" + strings.ToLower(e[i+1:i+3]))
				i += 2
				continue
			}
			sb.WriteByte(e[i])
		}
		return sb.String()
	}
	jsonHTML, _ := json.Marshal(s)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	jsonPlain := strings.TrimSpace(buf.String())
	var ascii strings.Builder
	for _, c := range jsonPlain[1 : len(jsonPlain)-1] {
		if c < 0x80 {
			ascii.WriteRune(c)
			continue
		}
		for _, u := range utf16.Encode([]rune{c}) {
			fmt.Fprintf(&ascii, `\u%04x`, u)
		}
	}
	forms := map[string]string{
		"raw":          s,
		"query":        url.QueryEscape(s),
		"query lower":  lower(url.QueryEscape(s)),
		"path":         url.PathEscape(s),
		"path lower":   lower(url.PathEscape(s)),
		"url path":     strings.TrimPrefix((&url.URL{Path: "/" + s}).EscapedPath(), "/"),
		"user info":    strings.TrimPrefix(url.UserPassword("", s).String(), ":"),
		"json":         string(jsonHTML[1 : len(jsonHTML)-1]),
		"json no html": jsonPlain[1 : len(jsonPlain)-1],
		"json ascii":   ascii.String(),
	}
	texts := maps.Clone(forms)
	for tname, t := range texts {
		for name, e := range map[string]*base64.Encoding{"std": base64.StdEncoding, "url": base64.URLEncoding} {
			forms[tname+" base64 "+name] = e.EncodeToString([]byte(t))
			forms[tname+" base64 raw "+name] = e.WithPadding(base64.NoPadding).EncodeToString([]byte(t))
			for k := range 3 {
				b := e.WithPadding(base64.NoPadding).EncodeToString(append(make([]byte, k), t...))
				forms[fmt.Sprintf("%s base64 %s at offset %d", tname, name, k)] = b[(8*k+5)/6 : 8*(k+len(t))/6]
			}
		}
	}
	return forms
}

// leakForms is every form of every secret of the test, Basic credentials
// included.
func leakForms() map[string]string {
	all := map[string]string{}
	for sname, s := range map[string]string{"SECRET": redactSecret, "PATH_SECRET": redactPathSecret, "USER_SECRET": redactUserSecret} {
		for name, f := range secretForms(s) {
			all[sname+" "+name] = f
		}
	}
	all["basic alice:SECRET"] = base64.StdEncoding.EncodeToString([]byte("alice:" + redactSecret))
	all["basic USER_SECRET:pw"] = base64.StdEncoding.EncodeToString([]byte(redactUserSecret + ":pw"))
	return all
}

func wantNoLeak(t *testing.T, what string, b []byte) {
	t.Helper()
	for name, f := range leakForms() {
		if bytes.Contains(b, []byte(f)) {
			t.Errorf("%s holds the %s form %q", what, name, f)
		}
	}
}

// TestRedactionEndToEnd sends secrets in a query, a path, headers, bodies
// and Basic credentials to a server that echoes them in every encoding,
// through the built binary, and searches what the CLI prints and every
// byte the store holds (WAL, checkpoints, objects) for any encoding of
// them.
func TestRedactionEndToEnd(t *testing.T) {
	t.Parallel()
	ts := echoServer(t)
	u, _ := url.Parse(ts.URL)
	c := newCLI(t)
	c.env = append(c.env, "SECRET="+redactSecret, "PATH_SECRET="+redactPathSecret, "USER_SECRET="+redactUserSecret, "TQW_LOG=debug")
	wf := filepath.Join(c.dir, "redact.yaml")
	if err := os.WriteFile(wf, []byte(redactWorkflow), 0o600); err != nil {
		t.Fatal(err)
	}
	input := fmt.Sprintf(`{"url": %q, "host": %q}`, ts.URL, u.Host)
	var printed bytes.Buffer
	record := func(out, errOut string) string {
		printed.WriteString(out)
		printed.WriteString(errOut)
		return out
	}
	out := record(c.must(0, "run", wf, "--input", input, "--run-id", "red1", "--json"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var end endEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &end); err != nil {
		t.Fatal(err)
	}
	var result struct{ Auth, Echoed, Message string }
	if err := json.Unmarshal(end.Result, &result); err != nil {
		t.Fatalf("result %s: %v", end.Result, err)
	}
	if result.Auth != "Basic ***" || result.Echoed != "marker="+redactMarker+"&token=***" || !strings.Contains(result.Message, "want status [201]") {
		t.Fatalf("result %+v", result)
	}
	hist := record(c.must(0, "history", "red1", "--json"))
	for _, want := range []string{redactMarker, `"raw_query":"marker=visible-marker-1\u0026token=***"`, "/p/***/end", `"pass":"***"`, `"user":"alice"`, `"X-Token":["***"]`} {
		if !strings.Contains(hist, want) {
			t.Errorf("history --json lacks %q", want)
		}
	}
	record(c.must(0, "history", "red1"))
	status := record(c.must(0, "status", "red1", "--json"))
	if !strings.Contains(status, `"state":"succeeded"`) {
		t.Fatalf("status %s", status)
	}
	record(c.must(0, "status", "red1"))
	wantNoLeak(t, "what the CLI printed", printed.Bytes())

	wal, _ := searchStore(t, c)
	if wal == 0 {
		t.Fatal("no WAL object was searched")
	}
	// The CLI's few commits stay in the WAL; fold them into a checkpoint,
	// so that its chunks are searched too.
	db, err := kv.Open(context.Background(), c.openStore(), kv.Options{Prefix: "queue"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, chunks := searchStore(t, c); chunks == 0 {
		t.Fatal("the checkpoint wrote no chunk to search")
	}
}

// searchStore checks the raw bytes of every file in c's store for every
// form of the secrets, and that some file holds the marker the echoes
// carry beside them. It returns how many WAL objects and checkpoint
// chunks it searched.
func searchStore(t *testing.T, c *cli) (wal, chunks int) {
	t.Helper()
	root := strings.TrimPrefix(c.store, "file://")
	var files, markers int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		rel := filepath.ToSlash(strings.TrimPrefix(p, root))
		switch {
		case strings.Contains(rel, "/wal/"):
			wal++
		case strings.Contains(rel, "/chunk/"):
			chunks++
		}
		if bytes.Contains(b, []byte(redactMarker)) {
			markers++
		}
		wantNoLeak(t, "store file "+rel, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if markers == 0 {
		t.Fatalf("none of the %d files in the store holds the marker: the search proves nothing", files)
	}
	return wal, chunks
}

// TestShortSecretIsRefusedAtRunStart: a secret under the minimum length
// stops run and submit before anything is written, naming the secret and
// the minimum but never the value; an empty one counts as unset.
func TestShortSecretIsRefusedAtRunStart(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := filepath.Join(c.dir, "short.yaml")
	if err := os.WriteFile(wf, []byte(`tqw: v1
name: short
secrets: [PIN]
steps:
  - id: get
    action: http
    with: {url: "http://127.0.0.1:1/", query: {count: "10"}, headers: {X-Pin: "${ secrets.PIN }"}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	root := strings.TrimPrefix(c.store, "file://")
	c.env = append(c.env, "PIN=§")
	for _, verb := range []string{"run", "submit"} {
		code, out, errOut := c.run(verb, wf)
		if code != exitUsage || !strings.Contains(errOut, "secret PIN (declared by workflow short) is 2 bytes long; a secret must be at least 8 bytes") || out != "" {
			t.Fatalf("%s with a 2-byte secret: exit %d, stdout %q, stderr %q; want exit %d naming PIN and the minimum", verb, code, out, errOut, exitUsage)
		}
		if strings.Contains(errOut, "§") {
			t.Fatalf("%s: stderr %q shows the secret's value", verb, errOut)
		}
		if _, err := os.Stat(root); !os.IsNotExist(err) {
			t.Fatalf("%s wrote the store %s (%v) although it refused the run", verb, root, err)
		}
	}
	c.env = append(c.env, "PIN=")
	code, _, errOut := c.run("run", wf)
	if code != exitFailed || !strings.Contains(errOut, "secret PIN is not set") {
		t.Fatalf("run with an empty secret: exit %d, stderr %q; want the step to fail as for an unset secret", code, errOut)
	}
}
