package ui_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/server/ui"
)

func get(t *testing.T, h http.Handler, method, target string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, res *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatalf("gzip body: %v", err)
		}
	}
	return b
}

// onDisk reads an asset from the source folder, to compare with what is served.
func onDisk(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("assets", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAssetsServedWithTheirContentType(t *testing.T) {
	h := ui.Handler()
	names := ui.Assets()
	want := map[string]string{
		"index.html":             "text/html; charset=utf-8",
		"app.js":                 "text/javascript; charset=utf-8",
		"app.css":                "text/css; charset=utf-8",
		"favicon.svg":            "image/svg+xml",
		"vendor/mermaid.min.js":  "text/javascript; charset=utf-8",
		"vendor/mermaid.LICENSE": "text/plain; charset=utf-8",
	}
	for name := range want {
		if !contains(names, name) {
			t.Errorf("asset %s is not embedded (have %v)", name, names)
		}
	}
	for _, name := range names {
		ct, ok := ui.ContentType(name)
		if !ok {
			t.Errorf("asset %s has no content type: the handler would not serve it", name)
			continue
		}
		if w, listed := want[name]; listed && ct != w {
			t.Errorf("ContentType(%s) = %q, want %q", name, ct, w)
		}
		for _, enc := range []string{"", "gzip, deflate, br"} {
			res := get(t, h, "GET", ui.AssetPrefix+name, map[string]string{"Accept-Encoding": enc})
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s%s (Accept-Encoding %q): %d", ui.AssetPrefix, name, enc, res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != ct {
				t.Errorf("GET %s: Content-Type %q, want %q", name, got, ct)
			}
			if enc == "" && res.Header.Get("Content-Encoding") != "" {
				t.Errorf("GET %s without Accept-Encoding: encoded %q", name, res.Header.Get("Content-Encoding"))
			}
			if !bytes.Equal(body(t, res), onDisk(t, name)) {
				t.Errorf("GET %s (Accept-Encoding %q): body differs from assets/%s", name, enc, name)
			}
		}
	}
	// The bundle is the asset gzip pays off on.
	res := get(t, h, "GET", ui.AssetPrefix+"vendor/mermaid.min.js", map[string]string{"Accept-Encoding": "gzip"})
	if res.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("mermaid.min.js with Accept-Encoding gzip: Content-Encoding %q", res.Header.Get("Content-Encoding"))
	}
	res = get(t, h, "GET", ui.AssetPrefix+"vendor/mermaid.min.js", map[string]string{"Accept-Encoding": "gzip;q=0, identity"})
	if res.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 refuses gzip, got Content-Encoding %q", res.Header.Get("Content-Encoding"))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	h := ui.Handler()
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/", http.StatusFound},
		{"GET", "/ui/", http.StatusOK},
		{"GET", "/ui/runs/r-1", http.StatusOK},
		{"GET", "/ui/assets/app.js", http.StatusOK},
		{"GET", "/ui/assets/nope.js", http.StatusNotFound},
		{"GET", "/elsewhere", http.StatusNotFound},
		{"POST", "/ui/", http.StatusMethodNotAllowed},
	} {
		res := get(t, h, tc.method, tc.path, nil)
		if res.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, res.StatusCode, tc.status)
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-") {
			t.Errorf("%s %s: Content-Security-Policy %q, want default-src 'self' and nothing unsafe", tc.method, tc.path, csp)
		}
		if !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s %s: Content-Security-Policy %q allows framing", tc.method, tc.path, csp)
		}
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s: X-Content-Type-Options %q", tc.method, tc.path, got)
		}
		if res.Header.Get("Set-Cookie") != "" {
			t.Errorf("%s %s sets a cookie", tc.method, tc.path)
		}
	}
}

func TestRoutes(t *testing.T) {
	h := ui.Handler()
	index := onDisk(t, "index.html")
	for _, p := range []string{"/ui/", "/ui/runs/abc", "/ui/workflows", "/ui/workflows/approval.tqw.yaml"} {
		res := get(t, h, "GET", p, nil)
		if res.StatusCode != http.StatusOK || !bytes.Equal(body(t, res), index) {
			t.Errorf("GET %s: status %d, want 200 with index.html", p, res.StatusCode)
		}
	}
	for _, p := range []string{"/", "/ui"} {
		res := get(t, h, "GET", p, nil)
		if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
			t.Errorf("GET %s: %d Location %q, want 302 to /ui/", p, res.StatusCode, res.Header.Get("Location"))
		}
	}
	res := get(t, h, "DELETE", "/ui/assets/app.js", nil)
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("DELETE: %d Allow %q", res.StatusCode, res.Header.Get("Allow"))
	}
	res = get(t, h, "HEAD", "/ui/assets/app.css", nil)
	if res.StatusCode != http.StatusOK || len(body(t, res)) != 0 || res.Header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Errorf("HEAD app.css: %d, %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

func TestRevalidationAnswers304(t *testing.T) {
	h := ui.Handler()
	for _, enc := range []string{"", "gzip"} {
		res := get(t, h, "GET", "/ui/assets/app.js", map[string]string{"Accept-Encoding": enc})
		etag := res.Header.Get("ETag")
		if !strings.HasPrefix(etag, `"`) || res.Header.Get("Cache-Control") != "no-cache" {
			t.Fatalf("app.js (Accept-Encoding %q): ETag %q, Cache-Control %q", enc, etag, res.Header.Get("Cache-Control"))
		}
		res = get(t, h, "GET", "/ui/assets/app.js", map[string]string{"Accept-Encoding": enc, "If-None-Match": etag})
		if res.StatusCode != http.StatusNotModified {
			t.Errorf("If-None-Match %s: status %d, want 304", etag, res.StatusCode)
		}
	}
	plain := get(t, h, "GET", "/ui/assets/app.js", nil).Header.Get("ETag")
	gz := get(t, h, "GET", "/ui/assets/app.js", map[string]string{"Accept-Encoding": "gzip"}).Header.Get("ETag")
	if plain == gz {
		t.Errorf("identity and gzip share the ETag %s", plain)
	}
}

// xmlNamespace is the one absolute URL our own assets may hold: an SVG
// namespace name, which nothing loads.
var xmlNamespace = regexp.MustCompile(`http://www\.w3\.org/[0-9]{4}/(svg|xlink|xhtml)`)

// loadsURL matches an absolute or protocol-relative URL in a place a browser
// would fetch it from: an attribute, CSS url() or @import, import(), fetch,
// importScripts, a script src, or new EventSource/WebSocket/Worker.
// It is matched against the text before each "//" (a regexp over the whole
// 5 MB bundle takes seconds).
var loadsURL = regexp.MustCompile(`(?i)((src|href|action|srcset|poster|data)\s*=\s*["']?|url\(\s*["']?|@import\s+["']?|import\s*\(\s*["']|fetch\s*\(\s*["']|importScripts\s*\(\s*["']|\.src\s*=\s*["']|new\s+(EventSource|WebSocket|Worker|SharedWorker)\s*\(\s*["'])(https?:|wss?:)?//$`)

// findLoad returns the first place b loads a URL from, or nil.
func findLoad(b []byte) []byte {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte("//"))
		if i < 0 {
			return nil
		}
		end := off + i + 2
		if m := loadsURL.Find(b[max(0, end-48):end]); m != nil {
			return b[end-len(m) : min(len(b), end+40)]
		}
		off = end
	}
}

func TestNoAssetLoadsAnythingFromElsewhere(t *testing.T) {
	err := fs.WalkDir(os.DirFS("assets"), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(name, ".gz") {
			return err // a .gz is checked against its source by TestAssetsServedWithTheirContentType
		}
		b := onDisk(t, name)
		if m := findLoad(b); m != nil {
			t.Errorf("assets/%s loads from another origin: %q", name, m)
		}
		if strings.HasPrefix(name, "vendor/") {
			return nil // third-party text cites URLs in messages and licences
		}
		rest := xmlNamespace.ReplaceAll(b, nil)
		if m := regexp.MustCompile(`(?i)(https?:|wss?:)//\S*`).Find(rest); m != nil {
			t.Errorf("assets/%s holds the URL %q: the UI must work offline, same-origin only", name, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The check must be able to fail.
	for _, bad := range []string{`<script src="https://cdn.example/x.js">`, `@import "//fonts.example/a.css";`, `fetch('https://api.example')`} {
		if findLoad([]byte(bad)) == nil {
			t.Errorf("loadsURL misses %s", bad)
		}
	}
}

// TestPagesReferenceOnlyEmbeddedAssets: every /ui/assets/ path the page and
// its script name is one the handler serves.
func TestPagesReferenceOnlyEmbeddedAssets(t *testing.T) {
	h := ui.Handler()
	ref := regexp.MustCompile(`/ui/assets/[A-Za-z0-9_./-]+`)
	seen := 0
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		for _, m := range ref.FindAll(onDisk(t, name), -1) {
			seen++
			if res := get(t, h, "GET", string(m), nil); res.StatusCode != http.StatusOK {
				t.Errorf("assets/%s names %s, which is %d", name, m, res.StatusCode)
			}
		}
	}
	if seen < 4 { // the stylesheet, the script, the icon, Mermaid
		t.Errorf("found only %d asset references; the pattern is broken", seen)
	}
}
