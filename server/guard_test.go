package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// send makes one request (header "Host" sets the Host) and returns the
// status, the headers, and the code and field of the error answered.
func send(t *testing.T, hc *http.Client, method, u, body string, header map[string]string) (int, http.Header, string, string) {
	t.Helper()
	status, h, b := call(t, hc, method, u, body, header)
	var e struct {
		Error struct {
			Code  string `json:"code"`
			Field string `json:"field"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(b), &e)
	return status, h, e.Error.Code, e.Error.Field
}

// TestHostMustNameTheServer: a Host naming another server is 421 with the
// JSON error on every path (the data and the UI's probes alike); the
// address the connection reached, localhost on loopback and allowed
// names pass.
func TestHostMustNameTheServer(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.AllowedHosts = []string{"tqw.example.com", "other.example:8443"} })
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: "h1"}); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(f.hs.URL)
	port := u.Port()
	for host, want := range map[string]int{
		u.Host:                         200,
		"localhost:" + port:            200,
		"LOCALHOST:" + port:            200,
		"tqw.example.com":              200,
		"tqw.example.com:443":          200,
		"other.example:8443":           200,
		"attacker.example":             421,
		"attacker.example:" + port:     421,
		"other.example:8444":           421,
		"127.0.0.1:1":                  421,
		"localhost":                    421,
		"tqw.example.com.evil:" + port: 421,
	} {
		status, _, code, field := send(t, f.raw(), "GET", f.hs.URL+"/v1/runs", "", map[string]string{"Host": host})
		if status != want || want == 421 && (code != "misdirected" || field != "Host") {
			t.Errorf("Host %q: %d %s %s, want %d", host, status, code, field, want)
		}
	}
	status, _, _, _ := send(t, http.DefaultClient, "GET", f.hs.URL+"/healthz", "", map[string]string{"Host": "attacker.example"})
	if status != http.StatusMisdirectedRequest {
		t.Errorf("/healthz with a foreign Host: %d, want 421", status)
	}
	if _, err := server.New(server.Config{Runtime: f.rt, Interpreter: f.it, AllowedHosts: []string{"http://x"}}); !errors.Is(err, server.ErrConfig) {
		t.Errorf("an allowed host with a scheme: %v, want ErrConfig", err)
	}
}

// TestListenAddrNamesTheServer: the listen address itself (a wildcard one
// included, as the lease advertises it) is a Host the server answers to.
func TestListenAddrNamesTheServer(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.ListenAddr = "[::]:7700" })
	for host, want := range map[string]int{"[::]:7700": 200, "[::]:7701": 421, "0.0.0.0:7700": 421} {
		if status, _, _, _ := send(t, f.raw(), "GET", f.hs.URL+"/v1/runs", "", map[string]string{"Host": host}); status != want {
			t.Errorf("Host %q with ListenAddr [::]:7700: %d, want %d", host, status, want)
		}
	}
}

// TestCrossOriginIsRefused: whatever the token, a request from a page of
// another origin is 403 and does nothing; the server's own origin, an
// allowed one, and a top-level navigation to the UI pass.
func TestCrossOriginIsRefused(t *testing.T) {
	for _, token := range []string{"", "guard-test-token-0123456789"} {
		f := newFixture(t, func(c *server.Config) {
			c.Token = token
			c.AllowedOrigins = []string{"https://tqw.example.com"}
			c.UI = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ui") })
		})
		own := f.hs.URL
		auth := map[string]string{}
		if token != "" {
			auth["Authorization"] = "Bearer " + token
		}
		with := func(h map[string]string) map[string]string {
			out := map[string]string{"Content-Type": "application/json"}
			for k, v := range auth {
				out[k] = v
			}
			for k, v := range h {
				out[k] = v
			}
			return out
		}
		body := `{"workflow":"greet.yaml","run_id":"x1"}`
		for name, tc := range map[string]struct {
			h    map[string]string
			want int
		}{
			"foreign origin":          {map[string]string{"Origin": "http://127.0.0.1:1"}, 403},
			"null origin":             {map[string]string{"Origin": "null"}, 403},
			"same-site":               {map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:1"}, 403},
			"cross-site":              {map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
			"own origin other scheme": {map[string]string{"Origin": strings.Replace(own, "http:", "https:", 1)}, 403},
		} {
			status, _, code, _ := send(t, f.raw(), "POST", f.hs.URL+"/v1/runs", body, with(tc.h))
			if status != tc.want || code != "cross_origin" {
				t.Errorf("token %q, %s: %d %s, want %d cross_origin", token, name, status, code, tc.want)
			}
		}
		// Reads too: a rebinding or cross-site page reads nothing.
		if status, _, _, _ := send(t, f.raw(), "GET", f.hs.URL+"/v1/runs", "", with(map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"})); status != 403 {
			t.Errorf("token %q: a cross-site read: %d, want 403", token, status)
		}
		if _, err := f.c.Run(f.ctx, "x1"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("token %q: a refused cross-origin submission made a run: %v", token, err)
		}
		for name, h := range map[string]map[string]string{
			"own origin":     {"Origin": own, "Sec-Fetch-Site": "same-origin"},
			"allowed origin": {"Origin": "https://tqw.example.com", "Sec-Fetch-Site": "cross-site"},
			"no browser":     {},
		} {
			if status, _, _, _ := send(t, f.raw(), "POST", f.hs.URL+"/v1/runs", `{"workflow":"greet.yaml"}`, with(h)); status != 201 {
				t.Errorf("token %q, %s: %d, want 201", token, name, status)
			}
		}
		nav := map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
		if status, _, _, _ := send(t, http.DefaultClient, "GET", f.hs.URL+"/runs/x", "", nav); status != 200 {
			t.Errorf("token %q: a link to the UI from another site: %d, want 200", token, status)
		}
		nav["Sec-Fetch-Dest"] = "iframe"
		if status, _, _, _ := send(t, http.DefaultClient, "GET", f.hs.URL+"/runs/x", "", nav); status != 403 {
			t.Errorf("token %q: the UI framed by another site: %d, want 403", token, status)
		}
	}
}

// TestJSONEndpointsTakeOnlyJSON: every POST the document declares under
// /v1 (webhooks aside) refuses a body a browser sends without a preflight
// (text/plain, a form) with 415, and writes nothing.
func TestJSONEndpointsTakeOnlyJSON(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "ct1", Input: json.RawMessage(`{"request":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("ct1", "waiting")
	paths := map[string]string{"POST /v1/runs": "/v1/runs", "POST /v1/runs/{id}/cancel": "/v1/runs/ct1/cancel",
		"POST /v1/signals/{key}": "/v1/signals/approve:ct1", "POST /v1/validate": "/v1/validate",
		"POST /v1/runs/{id}/retry": "/v1/runs/ct1/retry", "POST /v1/runs/{id}/skip": "/v1/runs/ct1/skip", "POST /v1/bulk": "/v1/bulk",
		"POST /v1/runs/{id}/fork": "/v1/runs/ct1/fork", "POST /v1/import": "/v1/import"}
	for _, op := range f.conf.operations() {
		if !strings.HasPrefix(op, "POST /v1/") || strings.HasPrefix(op, "POST /v1/hooks/") {
			continue
		}
		p, ok := paths[op]
		if !ok {
			t.Errorf("%s: no request for it in this test; add one", op)
			continue
		}
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=latin1", ""} {
			status, h, code, field := send(t, f.raw(), "POST", f.hs.URL+p, `{"approved":true,"by":"x","workflow":"greet.yaml"}`, map[string]string{"Content-Type": ct})
			if status != http.StatusUnsupportedMediaType || code != "unsupported_media_type" || field != "Content-Type" || h.Get("Accept-Post") == "" {
				t.Errorf("%s with Content-Type %q: %d %s %s, want 415", op, ct, status, code, field)
			}
		}
	}
	if run := f.waitState("ct1", "waiting"); run.State != "waiting" {
		t.Fatalf("a refused body changed the run: %+v", run)
	}
	if status, _, _, _ := send(t, f.raw(), "POST", f.hs.URL+"/v1/runs", `{"workflow":"greet.yaml"}`, map[string]string{"Content-Type": "application/json; charset=UTF-8"}); status != 201 {
		t.Errorf("application/json; charset=UTF-8: %d, want 201", status)
	}
}

// TestWrongMethodIs405: a method a path does not serve is 405 with Allow
// and the JSON error, under /v1 and outside it; an unknown path stays 404.
func TestWrongMethodIs405(t *testing.T) {
	f := newFixture(t)
	for req, allow := range map[string]string{
		"PUT /v1/runs":           "GET, HEAD, POST",
		"DELETE /v1/runs/x":      "GET, HEAD",
		"GET /v1/signals/k":      "POST, DELETE",
		"GET /v1/runs/x/cancel":  "POST",
		"POST /healthz":          "GET, HEAD",
		"PATCH /v1/openapi.json": "GET, HEAD",
	} {
		method, p, _ := strings.Cut(req, " ")
		status, h, code, _ := send(t, http.DefaultClient, method, f.hs.URL+p, "", nil)
		if status != http.StatusMethodNotAllowed || h.Get("Allow") != allow || code != "method_not_allowed" || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d Allow %q code %q, want 405 Allow %q", req, status, h.Get("Allow"), code, allow)
		}
	}
	if status, _, code, _ := send(t, http.DefaultClient, "PUT", f.hs.URL+"/v1/nothing", "", nil); status != 404 || code != "not_found" {
		t.Errorf("an unknown path: %d %s, want 404", status, code)
	}
}

// TestStrictBodies: duplicate keys at any depth, invalid UTF-8 and keys
// with NUL, control characters or dot segments are 400 naming the field,
// and write nothing.
func TestStrictBodies(t *testing.T) {
	f := newFixture(t)
	for body, field := range map[string]string{
		`{"workflow":"greet.yaml","workflow":"approval.tqw.yaml"}`:      "workflow",
		`{"workflow":"greet.yaml","input":{"name":"a","name":"b"}}`:     "input",
		`{"workflow":"greet.yaml","input":{"l":[{"x":1,"x":2}]}}`:       "input",
		"{\"workflow\":\"greet.yaml\",\"input\":{\"name\":\"\xff\"}}":   "input",
		"{\"workflow\":\"greet.yaml\",\"labels\":{\"team\":\"a\xc0\"}}": "labels",
		`{"workflow":"greet.yaml"} {"workflow":"greet.yaml"}`:           "",
	} {
		status, _, code, got := send(t, f.raw(), "POST", f.hs.URL+"/v1/runs", body, map[string]string{"Content-Type": "application/json"})
		if status != 400 || code != "bad_request" || got != field {
			t.Errorf("body %q: %d %s field %q, want 400 on %q", body, status, code, got, field)
		}
	}
	for _, payload := range []string{`{"a":1,"a":2}`, "\"\xff\"", `{"a":{"b":1,"b":1}}`} {
		status, _, _, field := send(t, f.raw(), "POST", f.hs.URL+"/v1/signals/approve:s1", payload, map[string]string{"Content-Type": "application/json"})
		if status != 400 || field != "payload" {
			t.Errorf("signal payload %q: %d field %q, want 400 on payload", payload, status, field)
		}
	}
	// Unchecked against the document: its validator cannot route a path
	// with a newline or a literal "..".
	for _, key := range []string{"a%00b", "a%0Ab", "a%2F..%2Fb", "..", "a/../b", "a%7Fb", "a%C2%85b", "%FF", "a%2F%2Fb"} {
		status, _, code, field := send(t, http.DefaultClient, "POST", f.hs.URL+"/v1/signals/"+key, `{}`, map[string]string{"Content-Type": "application/json"})
		if status != 400 || code != "bad_request" || field != "key" {
			t.Errorf("signal key %q: %d %s field %q, want 400 on key", key, status, code, field)
		}
	}
	list, err := f.c.ListRuns(f.ctx, client.ListOptions{})
	if err != nil || len(list.Runs) != 0 {
		t.Fatalf("refused bodies made runs: %+v %v", list.Runs, err)
	}
	if status, _, _, field := send(t, f.raw(), "GET", f.hs.URL+"/v1/runs?status=%zz", "", nil); status != 400 || field != "query" {
		t.Errorf("a malformed query: %d field %q, want 400 on query", status, field)
	}
}

// TestBearerSchemeIsCaseInsensitive: RFC 9110 auth schemes ignore case.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	const token = "guard-test-token-0123456789"
	f := newFixture(t, func(c *server.Config) { c.Token = token })
	for h, want := range map[string]int{"bearer " + token: 200, "BEARER " + token: 200, "Bearer  " + token: 200, "bearer wrong-token-0123456789": 401, "Basic " + token: 401, token: 401} {
		if status, _, _, _ := send(t, f.raw(), "GET", f.hs.URL+"/v1/runs", "", map[string]string{"Authorization": h}); status != want {
			t.Errorf("Authorization %q: %d, want %d", h, status, want)
		}
	}
}
