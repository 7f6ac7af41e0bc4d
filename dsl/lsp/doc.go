// Package lsp is the tqw workflow language server (`tqw-dsl lsp`): the
// Language Server Protocol 3.17 over a stream, with the loader's own
// diagnostics and the navigation an outline of the file allows.
//
// What it offers for an open document:
//   - diagnostics from dsl.Parse, recomputed a debounce after the last
//     change (Options.Debounce), with ranges, codes, the hint as related
//     information and exactly the messages and positions of
//     `tqw-dsl validate` (TestDiagnosticsMatchValidate);
//   - definition, references and rename of step ids: next,
//     switch[].next, catch[].next, on_timeout and steps.<id> inside
//     expressions (dsl.ParseOutline), in every block: parallel
//     branches, a map's steps, on_error and finally;
//   - document symbols, one per step, by id and kind, nested as the
//     blocks are: a parallel step's branches and their steps, a map
//     step's steps, on_error's and finally's;
//   - completion of step ids (of the same block for next, switch,
//     catch and on_timeout; those an expression may read after
//     steps.), declared secrets, assigned vars, the
//     output fields of built-in actions, action names, with keys per
//     action (from the schema), error types and expression names and
//     functions;
//   - hover: a key's documentation, a built-in action's inputs and
//     output, a referenced step and what it outputs, a name an expression
//     reads (item, error, run.outcome) and where it is readable;
//   - code actions for the hints with one obvious fix ("did you mean",
//     declaring an undeclared secret).
//
// Positions are UTF-16 code units unless the client offers utf-32 (the
// loader's own unit, code points) or utf-8 in positionEncodings.
// Documents are synchronised whole (TextDocumentSyncKind.Full).
//
// JSON-RPC: github.com/sourcegraph/jsonrpc2 frames and dispatches the
// messages (Content-Length headers, requests handled one at a time in
// arrival order). It was chosen in November 2026 after comparing what
// the module proxy serves: it is maintained (v0.2.3, September 2026),
// used by many Go language servers, and depends on nothing the server
// loads. go.lsp.dev/protocol, the only published module of LSP types, was
// last released in 2022 (v0.12.0) and does not build against the
// current go.lsp.dev/jsonrpc2 v1; github.com/tliron/glsp (v0.2.2, March
// 2024) brings a logging framework and a dozen modules with it. The LSP
// structures this server uses are therefore declared here
// (protocol.go), with the specification's names.
//
// Costs: no object-store requests and no I/O besides the stream; each
// change costs one outline parse at once and one dsl.Parse after the
// debounce. The server keeps the text of open documents only.
package lsp
