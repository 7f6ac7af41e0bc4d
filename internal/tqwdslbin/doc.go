// Package tqwdslbin gives end-to-end tests a tqw-dsl binary to start as a
// real process. scripts/test.sh builds one from the checkout before the
// tests and names it in TQW_TEST_TQW_DSL, so the packages that start
// tqw-dsl (cmd/tqw-dsl, dsl/lsp, server, server/ui) share one build
// instead of linking it four times; a plain `go test` without the
// variable builds one into the folder the test gives.
//
// The binary is built without -race and without the invariants tag, as a
// user's is. It makes no object-store request.
package tqwdslbin
