package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed assets
var embedded embed.FS

// ContentSecurityPolicy is the policy every response of Handler carries:
// scripts, styles, images, fonts and connections from this origin only, no
// inline script or style, no plugins, no framing, forms post here only.
const ContentSecurityPolicy = "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// AssetPrefix is the URL path under which the assets are served.
const AssetPrefix = "/ui/assets/"

// asset is one embedded file; its hash and gzipped copy are made once,
// after Handler is called, so a CLI command that never serves pays nothing.
type asset struct {
	name  string
	ctype string
	raw   []byte
	once  sync.Once
	gz    []byte // nil when gzip does not make it smaller; set ahead from NAME.gz

	etag string
}

func (a *asset) load() {
	a.once.Do(func() {
		raw := a.raw
		sum := sha256.Sum256(raw)
		a.etag = `"` + hex.EncodeToString(sum[:12]) + `"`
		if a.gz != nil {
			return // compressed ahead (make ui-vendor)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		_, _ = zw.Write(raw)
		_ = zw.Close()
		if buf.Len() < len(raw) {
			a.gz = buf.Bytes()
		}
	})
}

// contentTypes are the types of the asset kinds the UI ships; an asset of
// another kind is refused by the tests, so none is served as a guess.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".txt":  "text/plain; charset=utf-8",
}

// ContentType returns the Content-Type Handler serves the asset NAME with
// (a path relative to the assets folder), and false for a kind it does not serve.
func ContentType(name string) (string, bool) {
	ext := path.Ext(name)
	if ct, ok := contentTypes[ext]; ok {
		return ct, true
	}
	if strings.HasSuffix(name, ".LICENSE") {
		return contentTypes[".txt"], true
	}
	return "", false
}

// Assets returns the names of the embedded assets (relative to the assets
// folder, as served under AssetPrefix), in lexical order. A file NAME.gz
// is not one: it is NAME compressed ahead, served to clients that accept gzip.
func Assets() []string {
	var names []string
	_ = fs.WalkDir(embedded, "assets", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".gz") {
			names = append(names, strings.TrimPrefix(p, "assets/"))
		}
		return err
	})
	return names
}

// Handler returns the UI's http.Handler, to mount at / (it answers / and
// /ui/...). It is safe for concurrent use and needs no token: the assets
// hold no data, and the pages send the API token themselves.
func Handler() http.Handler {
	tableOnce.Do(func() {
		table = buildTable()
		// Hash and compress in the background now, so the first page
		// does not wait for the Mermaid bundle's gzip.
		go func() {
			for _, a := range table {
				a.load()
			}
		}()
	})
	return &handler{assets: table}
}

var (
	tableOnce sync.Once
	table     map[string]*asset
)

func buildTable() map[string]*asset {
	assets := map[string]*asset{}
	for _, name := range Assets() {
		ct, ok := ContentType(name)
		raw, err := embedded.ReadFile("assets/" + name)
		if !ok || err != nil {
			continue
		}
		a := &asset{name: name, ctype: ct, raw: raw}
		// The Mermaid bundle comes compressed ahead: gzipping 5 MB at
		// start would cost a second of CPU, many under -race.
		if gz, err := embedded.ReadFile("assets/" + name + ".gz"); err == nil {
			a.gz = gz
		}
		assets[name] = a
	}
	return assets
}

type handler struct {
	assets map[string]*asset
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "the web UI answers only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/" || p == "/ui":
		http.Redirect(w, r, "/ui/", http.StatusFound)
	case strings.HasPrefix(p, AssetPrefix):
		a, ok := h.assets[strings.TrimPrefix(p, AssetPrefix)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		// Asset URLs carry no version, so the browser revalidates
		// (a 304 for an unchanged ETag) rather than keeping a stale
		// copy across an upgrade of the server.
		h.serve(w, r, a, "no-cache")
	case strings.HasPrefix(p, "/ui/"):
		h.serve(w, r, h.assets["index.html"], "no-cache")
	default:
		http.NotFound(w, r)
	}
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, a *asset, cache string) {
	a.load()
	hdr := w.Header()
	hdr.Set("Content-Type", a.ctype)
	hdr.Set("Cache-Control", cache)
	hdr.Set("Vary", "Accept-Encoding")
	body := a.raw
	etag := a.etag
	if a.gz != nil && acceptsGzip(r) {
		body = a.gz
		// A distinct ETag per encoding, as RFC 9110 wants of a strong one.
		etag = strings.TrimSuffix(a.etag, `"`) + `-gz"`
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Set("ETag", etag)
	// ServeContent answers If-None-Match with 304 and HEAD without a body;
	// a zero time leaves Last-Modified out (embedded files have none).
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		// "gzip;q=0" refuses it.
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
