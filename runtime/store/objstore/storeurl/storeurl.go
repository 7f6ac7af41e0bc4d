package storeurl

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
)

const forms = "write mem://NAME, file://PATH (file://.tqw or file:///abs/dir) or s3://BUCKET/PREFIX?endpoint=HOST:PORT"

// Open returns the store the URL names. ctx is unused today: no backend
// makes a request on open.
func Open(ctx context.Context, rawURL string) (objstore.Store, error) {
	_ = ctx
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("store URL %q has no scheme: %s", rawURL, forms)
	}
	switch scheme {
	case "mem":
		if rest == "" || strings.ContainsAny(rest, "/?#") {
			return nil, fmt.Errorf("store URL %q: write mem://NAME with a plain name, e.g. mem://test", rawURL)
		}
		return mem.Named(rest), nil
	case "file":
		return openFile(rawURL, rest)
	case "s3":
		return openS3(rawURL)
	default:
		return nil, fmt.Errorf("store URL %q: unknown scheme %q: %s", rawURL, scheme, forms)
	}
}

// openFile takes the path verbatim after "file://" so relative paths work
// (file://.tqw); "file:///tmp/x" is the absolute /tmp/x.
func openFile(rawURL, path string) (objstore.Store, error) {
	if path == "" {
		return nil, fmt.Errorf("store URL %q: no folder: write file://.tqw (relative) or file:///tmp/x (absolute)", rawURL)
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("store URL %q: a file URL takes no query or fragment: write file://PATH", rawURL)
	}
	if strings.HasPrefix(path, "localhost/") {
		path = strings.TrimPrefix(path, "localhost")
	}
	s, err := file.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", rawURL, err)
	}
	return s, nil
}

func openS3(rawURL string) (objstore.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w: %s", rawURL, err, forms)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("store URL %q: no bucket: write s3://BUCKET/PREFIX?endpoint=HOST:PORT", rawURL)
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "insecure":
		default:
			return nil, fmt.Errorf("store URL %q: unknown parameter %q: use endpoint, region and insecure", rawURL, k)
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		return nil, fmt.Errorf("store URL %q: no endpoint: add ?endpoint=HOST:PORT, e.g. ?endpoint=s3.amazonaws.com or ?endpoint=127.0.0.1:7070&insecure=1", rawURL)
	}
	insecure := false
	switch q.Get("insecure") {
	case "", "0", "false":
	case "1", "true":
		insecure = true
	default:
		return nil, fmt.Errorf("store URL %q: insecure=%q: write insecure=1 for plain http or leave it out for https", rawURL, q.Get("insecure"))
	}
	ak, sk := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if ak == "" || sk == "" {
		return nil, fmt.Errorf("store URL %q: missing credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment", rawURL)
	}
	s, err := s3.New(s3.Config{
		Endpoint: endpoint, Region: q.Get("region"), Bucket: u.Host,
		Prefix: strings.TrimPrefix(u.Path, "/"), AccessKey: ak, SecretKey: sk, Insecure: insecure,
	})
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", rawURL, err)
	}
	return s, nil
}
