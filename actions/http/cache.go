package http

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"log/slog"
	nethttp "net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/actions"
)

// MaxCachedBytes bounds a response kept with cache: a larger one (its
// body, headers and status encoded) is used but not kept.
const MaxCachedBytes = 1 << 20

// cacheMethods are the methods cache: true allows: those that only read.
var cacheMethods = []string{"GET", "HEAD"}

// Cache is with.cache: true (GET and HEAD), false, or {methods: [...]},
// which names the methods that may be cached instead.
type Cache struct {
	Methods []string
}

// DecodeArg accepts a boolean or {methods: [METHOD, ...]}.
func (c *Cache) DecodeArg(v any) error {
	switch v := v.(type) {
	case bool:
		if v {
			c.Methods = cacheMethods
		}
		return nil
	case map[string]any:
		for k := range v {
			if k != "methods" {
				return &actions.ArgError{Field: "." + k, Problem: "unknown field; want methods"}
			}
		}
		list, ok := v["methods"].([]any)
		if !ok || len(list) == 0 {
			return &actions.ArgError{Field: ".methods", Problem: "want a non-empty list of methods"}
		}
		for i, m := range list {
			s, ok := m.(string)
			if !ok || !slices.Contains(methods, strings.ToUpper(s)) {
				return &actions.ArgError{Field: fmt.Sprintf(".methods[%d]", i), Problem: fmt.Sprintf("want one of %s, got %v", strings.Join(methods, ", "), m)}
			}
			c.Methods = append(c.Methods, strings.ToUpper(s))
		}
		return nil
	}
	return fmt.Errorf("want true, false or {methods: [...]}, got %T", v)
}

// cacheKey is the answer-store key of req: SHA-256 over method, URL,
// Host, headers (sorted; the Idempotency-Key the action made up per run
// left out, so that runs can share) and body. Only the hash leaves this
// function: a secret in a header or the URL is never stored.
func cacheKey(req *nethttp.Request, call *actions.Call) (string, error) {
	h := sha256.New()
	field(h, "v1")
	field(h, req.Method)
	field(h, req.URL.String())
	field(h, req.Host)
	names := make([]string, 0, len(req.Header))
	for k := range req.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := req.Header[k]
		if k == "Idempotency-Key" && len(vs) == 1 && vs[0] == call.IdempotencyKey() {
			continue
		}
		field(h, k)
		for _, v := range vs {
			field(h, v)
		}
	}
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return "", err
		}
		var n [8]byte
		data, err := io.ReadAll(body)
		if err != nil {
			return "", err
		}
		binary.BigEndian.PutUint64(n[:], uint64(len(data)))
		h.Write(n[:])
		h.Write(data)
	}
	return Name + "/" + hex.EncodeToString(h.Sum(nil)), nil
}

// field writes s length-prefixed, so that no two field lists hash alike.
func field(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// cached returns the response another run kept under key, for a call
// that may reuse answers (a fork or a redrive). A failed or damaged read
// only costs the request.
func cached(ctx context.Context, call *actions.Call, log *slog.Logger, key string) (map[string]any, bool) {
	if !call.ReuseAnswers || call.Answers == nil {
		return nil, false
	}
	data, ok, err := call.Answers.Get(ctx, key)
	if err != nil {
		log.Warn("http: could not read the answer store; sending the request", "err", err)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	v, err := actions.DecodeJSON(data)
	out, isMap := v.(map[string]any)
	if err != nil || !isMap || out["status"] == nil {
		log.Warn("http: answer store entry unreadable; sending the request", "key", key)
		return nil, false
	}
	log.Info("http: response reused; no request sent", "status", out["status"])
	return out, true
}

// keep puts a response in the answer store, unless it is over
// MaxCachedBytes or its body is not UTF-8 text or JSON; a failure is logged (the response is used either way).
func keep(ctx context.Context, call *actions.Call, log *slog.Logger, key string, out map[string]any) {
	if call.Answers == nil {
		return
	}
	if b, isText := out["body"].(string); isText && !utf8.ValidString(b) {
		return // JSON would not keep it byte for byte
	}
	data, err := json.Marshal(out)
	if err == nil && len(data) > MaxCachedBytes {
		log.Debug("http: response over the cache bound; not kept", "bytes", len(data), "bound", MaxCachedBytes)
		return
	}
	if err == nil {
		err = call.Answers.Put(ctx, key, data)
	}
	if err != nil {
		log.Warn("http: could not keep the response in the answer store", "err", err)
	}
}
