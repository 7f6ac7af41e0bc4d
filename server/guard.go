package server

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/signal"
)

// The browser and network model (docs/API.md, "Browser and network
// model"): whatever the token setting, a request must name this server in
// its Host (421 otherwise, so DNS rebinding reads nothing), must not come
// from a page of another origin (403, so no page a user opens can drive
// the API with the user's network position), and a POST under /v1 must
// declare the body type its endpoint takes (415, so no body is parsed as
// JSON that a browser could send without a CORS preflight).

// hostGuard is what guard accepts, built once by New from the Config.
type hostGuard struct {
	listen    string          // canonical Config.ListenAddr, "" when unset
	names     map[string]bool // Config.AllowedHosts without a port: any port
	hostPorts map[string]bool // Config.AllowedHosts with a port
	origins   map[string]bool // canonical Config.AllowedOrigins
}

func newHostGuard(cfg Config) (*hostGuard, error) {
	g := &hostGuard{names: map[string]bool{}, hostPorts: map[string]bool{}, origins: map[string]bool{}}
	if cfg.ListenAddr != "" {
		h, ok := canonicalHost(cfg.ListenAddr, "")
		if !ok || strings.HasSuffix(h, ":") {
			return nil, fmt.Errorf("%w: ListenAddr %q: want HOST:PORT", ErrConfig, cfg.ListenAddr)
		}
		g.listen = h
	}
	for _, name := range cfg.AllowedHosts {
		if strings.ContainsAny(name, "/@?# ") || name == "" {
			return nil, fmt.Errorf("%w: allowed host %q: want a host name or address, with an optional :PORT", ErrConfig, name)
		}
		if _, _, err := net.SplitHostPort(name); err == nil {
			h, _ := canonicalHost(name, "")
			g.hostPorts[h] = true
			continue
		}
		h, ok := canonicalHost(name, "0")
		if !ok {
			return nil, fmt.Errorf("%w: allowed host %q: want a host name or address, with an optional :PORT", ErrConfig, name)
		}
		g.names[strings.TrimSuffix(h, ":0")] = true
	}
	for _, o := range cfg.AllowedOrigins {
		c, ok := canonicalOrigin(o)
		if !ok {
			return nil, fmt.Errorf("%w: allowed origin %q: want SCHEME://HOST[:PORT] (http or https, no path)", ErrConfig, o)
		}
		g.origins[c] = true
	}
	return g, nil
}

// canonicalHost returns host[:port] as "host:port" with the host in lower
// case, an IP in its canonical form (IPv4-mapped addresses unmapped) and
// defaultPort when none is given; ok is false for what names no host.
func canonicalHost(hostport, defaultPort string) (string, bool) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, defaultPort
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
	}
	if host == "" && port != "" {
		return "", false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().WithZone("").String()
	} else if strings.ContainsAny(host, ":[]%") {
		return "", false
	}
	return net.JoinHostPort(strings.ToLower(host), port), true
}

// canonicalOrigin returns an origin as "scheme://host:port" (the port
// explicit), or false for one that is not http(s)://HOST[:PORT].
func canonicalOrigin(origin string) (string, bool) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	h, ok := canonicalHost(u.Host, defaultPort(u.Scheme))
	if !ok {
		return "", false
	}
	return u.Scheme + "://" + h, true
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// hostAllowed reports whether r's Host names this server: the listen
// address, the address the connection arrived at (on a wildcard listen
// address, the interface the client reached), localhost:PORT when that
// address is loopback, or an allowed name.
func (g *hostGuard) hostAllowed(r *http.Request) bool {
	host, ok := canonicalHost(r.Host, defaultPort(requestScheme(r)))
	if !ok {
		return false
	}
	if host == g.listen || g.hostPorts[host] {
		return true
	}
	if name, _, err := net.SplitHostPort(host); err == nil && g.names[name] {
		return true
	}
	for _, own := range []string{g.listen, localAddr(r)} {
		ap, err := netip.ParseAddrPort(own)
		if err != nil {
			continue
		}
		if host == ap.String() {
			return true
		}
		if ap.Addr().IsLoopback() && host == net.JoinHostPort("localhost", fmt.Sprint(ap.Port())) {
			return true
		}
	}
	return false
}

// localAddr is the canonical address the request's connection arrived at,
// "" when the handler runs without one.
func localAddr(r *http.Request) string {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return ""
	}
	h, _ := canonicalHost(a.String(), "")
	return h
}

// crossOrigin says why r comes from a page of another origin ("" when it
// does not): a Sec-Fetch-Site other than same-origin or none (same-site
// included: another port of the same host is another origin), or an
// Origin that is not the server's own (the scheme and Host the request
// was sent to) nor allowed. A top-level navigation to a page outside /v1
// (a link to the UI) passes: it carries no body and the page it opens
// calls the API same-origin.
func (g *hostGuard) crossOrigin(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if c, ok := canonicalOrigin(origin); ok && g.origins[c] {
		return ""
	}
	site := r.Header.Get("Sec-Fetch-Site")
	switch site {
	case "", "same-origin", "none":
	default:
		if isNavigation(r) {
			return ""
		}
		return fmt.Sprintf("a page of another origin sent it (Sec-Fetch-Site: %s, Origin: %q)", site, origin)
	}
	if origin == "" {
		return ""
	}
	own, _ := canonicalHost(r.Host, defaultPort(requestScheme(r)))
	if c, ok := canonicalOrigin(origin); ok && c == requestScheme(r)+"://"+own {
		return ""
	}
	return fmt.Sprintf("its Origin %q is not this server's own", origin)
}

// isNavigation reports a browser's top-level GET of a page outside the API.
func isNavigation(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" &&
		r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/")
}

// guard applies the browser and network model before anything else sees
// the request; it also refuses, with the JSON error, a /v1 path that is not
// in canonical form (the mux would redirect it, a POST's body lost) and a
// malformed query string (whose bad pairs would be dropped unseen).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts.hostAllowed(r) {
			writeError(w, http.StatusMisdirectedRequest, "misdirected", "Host",
				fmt.Sprintf("Host %q does not name this server; it answers to the address it listens on (and localhost on loopback) or a name allowed with serve --allow-host", r.Host))
			return
		}
		if why := s.hosts.crossOrigin(r); why != "" {
			writeError(w, http.StatusForbidden, "cross_origin",
				"Origin", "refused: "+why+"; the API answers only its own origin, or one allowed with serve --allow-origin")
			return
		}
		p := r.URL.Path
		if p != "/v1" && !strings.HasPrefix(p, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		if key, ok := strings.CutPrefix(p, "/v1/signals/"); ok {
			if err := signal.CheckKey(key); err != nil {
				badSignalKey(w, err)
				return
			}
		}
		if clean := path.Clean(p); clean != p && clean+"/" != p {
			writeError(w, http.StatusBadRequest, "bad_request", "path", fmt.Sprintf("the path %q is not in canonical form (no '.', '..' or empty segments)", p))
			return
		}
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "query", "the query string is malformed: "+err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Body types of POST endpoints: JSON endpoints take only JSON, so no body a
// browser sends without a CORS preflight (text/plain, a form) is read.
var (
	jsonBody = []string{"application/json"}
	yamlBody = []string{"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
)

// bodyOf refuses (415) a request that carries a body, or a Content-Type,
// of a media type other than types; a charset parameter must be UTF-8.
func bodyOf(types []string, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if ct == "" && r.ContentLength == 0 {
			next(w, r)
			return
		}
		mt, params, err := mime.ParseMediaType(ct)
		cs, hasCharset := params["charset"]
		if err == nil && slices.Contains(types, mt) && (!hasCharset || strings.EqualFold(cs, "utf-8")) {
			next(w, r)
			return
		}
		w.Header().Set("Accept-Post", strings.Join(types, ", "))
		got := "none"
		if ct != "" {
			got = fmt.Sprintf("%q", ct)
		}
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type",
			fmt.Sprintf("%s %s takes a body of Content-Type %s (UTF-8); got %s", r.Method, r.URL.Path, strings.Join(types, " or "), got))
	})
}

// probeMethods are the methods allowedMethods tries.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods returns the methods a route other than the catch-alls
// ("/" and "/v1/") serves r's path with: the Allow header of a 405.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range probeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pat := mux.Handler(probe); pat != "" && pat != "/" && pat != "/v1/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// orMethodNotAllowed answers 405 with Allow, as the JSON error, a request
// whose path another route serves with another method, and passes the
// rest to next (the catch-all's own answer).
func orMethodNotAllowed(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allow := allowedMethods(mux, r)
		if len(allow) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", fmt.Sprintf("%s %s: this path takes %s; see /v1/openapi.json", r.Method, r.URL.Path, strings.Join(allow, ", ")))
	})
}
