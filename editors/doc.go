// Package editors holds the editor integrations of the workflow
// language; it has no Go API. vscode/ is the VS Code extension (a
// TypeScript client of `tqw-dsl lsp`), built and packaged as a .vsix by
// this package's test, never published from here. The language server
// itself is package dsl/lsp; docs/EDITORS.md says how to set up each
// editor. No object-store requests, no I/O outside the test.
package editors
