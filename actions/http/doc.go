// Package http is the built-in "http" action: one HTTP request per attempt.
//
// Arguments (the step's `with:`): method (GET, POST, PUT, PATCH, DELETE,
// HEAD or OPTIONS; default GET), url (required, http or https), headers,
// query, body, timeout, expect_status (a status or a list; default any 2xx),
// max_response_bytes (default 10 MiB) and cache (true for GET and HEAD, or
// {methods: [...]}).
//
// A body that is an object, a list, a number or a boolean is sent as JSON
// with Content-Type application/json; a string is sent as text/plain unless
// the headers set a Content-Type.
//
// Output: {status, headers, body}. Header names are lower case and repeated
// values are joined with ", ". The body is parsed when the response's
// Content-Type is JSON (application/json or any +json type), else it is a
// string; an empty body is null.
//
// Guarantees:
//   - Every attempt of a step sends the same `Idempotency-Key: <run id>/<step id>`
//     header, unless the workflow sets its own, so a server that honours the
//     header performs a retried request once.
//   - A response larger than max_response_bytes fails the attempt
//     (type http.response_too_large); it is never silently truncated.
//   - HTTP Basic credentials it sends (from the URL's user info or an
//     `Authorization: Basic` header) are reported through Call.Derive as
//     user:password, so the interpreter redacts their base64 when they
//     carry a secret; messages never repeat user info or query values.
//
// Errors and whether they are retryable:
//
//	status outside expect_status, 5xx     http.status_5xx       retryable
//	status outside expect_status, 408/429 http.status_4xx       retryable
//	other 4xx outside expect_status       http.status_4xx       not retryable
//	1xx-3xx outside expect_status         http.unexpected_status not retryable
//	refused, reset, DNS, TLS handshake    http.connection       retryable
//	TLS certificate rejected              http.connection       not retryable
//	per-attempt timeout                   timeout               retryable
//	context cancelled                     cancelled             not retryable
//	response over max_response_bytes     http.response_too_large not retryable
//	JSON Content-Type, body not JSON      http.invalid_body     not retryable
//	bad arguments                         validation            not retryable
//
// Status errors carry Status and the response as Error.Output, so `catch`
// can read the body.
//
// Cache: with cache, a successful response (within expect_status) is put
// in Call.Answers under "http/<hex SHA-256 of method, URL, Host, headers
// and body>" (the Idempotency-Key the action made up left out), unless it
// is over MaxCachedBytes encoded or its body is not UTF-8; a call with
// ReuseAnswers (a fork or a redrive) takes it from there and sends
// nothing. Only the hash of the request is stored, so a secret in it is
// never. A method the cache does not allow fails with validation before
// anything is sent.
//
// Costs: no object-store requests of its own; with cache, one
// Call.Answers Put per kept response and one Get per attempt of a call
// with ReuseAnswers. It does not
// follow the Retry-After header (the workflow's retry policy sets delays)
// and does not stream bodies: the whole response is held in memory, up to
// max_response_bytes.
package http
