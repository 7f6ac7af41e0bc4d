// Package ui is the web UI of `tqw-dsl serve`: a few pages of plain HTML,
// CSS and vanilla JavaScript, embedded in the binary, that drive the
// server's /v1 API from the browser.
//
// Handler serves them. It guarantees:
//
//   - Offline: every asset is embedded (embed.FS) and every URL it serves is
//     same-origin; Mermaid, which draws the step graphs, is a vendored copy
//     (assets/vendor, pinned in package.json and refreshed by `make
//     ui-vendor`), so `go run` needs neither Node nor a network.
//   - A strict Content-Security-Policy (default-src 'self', no inline
//     script or style, no framing) and nosniff on every response, so an
//     output a step produced can never run as script in the page.
//   - No credentials of its own: the pages ask for the API token once per
//     browser session, keep it in sessionStorage and send it as an
//     Authorization: Bearer header; nothing is a cookie, so a cross-site
//     request carries no authority (CSRF-safe). The assets hold no data,
//     so the handler itself needs no token.
//   - Cheap: the Mermaid bundle is gzipped ahead (assets/vendor/*.gz, made
//     by `make ui-vendor`; a test checks it inflates to the bundle); the
//     other assets are hashed and gzipped once per process, in the
//     background from the first call of Handler (a command that does not
//     serve pays nothing). A page costs one request per asset, each with
//     a strong ETag (304 when unchanged). The handler never touches the
//     store: every object-store request the UI causes is one of the API
//     calls it makes, whose costs the server states.
//
// A run's page draws its step graph from the run view's Mermaid source
// (nested blocks as subgraphs), its parallel branches (the run view's
// branches) and a map's progress (its map field) from the same GET
// /v1/runs/ID it already makes: no request of its own.
//
// Routes: / redirects to /ui/; /ui/assets/NAME is an asset; any other path
// under /ui/ is the page shell (index.html), which routes in the browser:
// /ui/ (runs), /ui/runs/ID, /ui/workflows, /ui/workflows/NAME. Other paths
// are 404 and methods other than GET and HEAD 405.
package ui
