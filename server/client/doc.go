// Package client is a typed Go client of the tqw HTTP API (server/openapi.json,
// docs/API.md), as 'tqw-dsl serve' serves it. It depends on nothing of tqw
// but package server/wire (standard library only): its body types are
// wire's, which the server encodes too, a test checks against the document
// both ways, and the server's tests decode every response into, refusing
// unknown fields, so the three cannot drift apart.
//
// Every method is one HTTP request (the event streams: one long request). A
// non-2xx answer is an *Error carrying the server's code, message and field;
// errors.Is matches it against ErrUnauthorized, ErrNotFound, ErrConflict and
// ErrRejected by status. What a method returns is what the server answered,
// which is durable state only (see package server), so a run or step this
// client reports ended never runs again. The client adds no object-store cost of its own; see
// package server for what each endpoint costs the store.
package client
