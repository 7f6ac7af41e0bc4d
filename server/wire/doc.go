// Package wire holds the request and response bodies of the tqw HTTP API
// (server/openapi.json, docs/API.md), written once: package server encodes
// them and package server/client decodes them (re-exporting each under its
// own name). It depends on the standard library only, so a program that
// speaks the API imports these types without the engine.
//
// The types are the document's component schemas, field for field: a
// test reads openapi.json and fails when a schema property has no field of
// a compatible JSON type, a field has no property, or a required property
// is omitempty. Changing a body means changing both, or that test fails.
//
// The package is types only: it does no I/O and costs no object-store
// request.
package wire
