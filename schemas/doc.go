// Package schemas embeds the JSON Schema (2020-12) of tqw workflow files
// and of `tqw-dsl validate --format json`.
//
// The workflow schema is the editor-facing half of the language
// definition: editors use it for completion, hovers and validation, and
// package dsl validates every loaded file against it before its own
// semantic checks. Draft07 renders it as JSON Schema draft-07 for
// SchemaStore (schemastore/tqw-workflow.json, kept current by a test;
// schemastore/check.mjs runs SchemaStore's checks on it). It costs no
// object-store requests and does no I/O beyond the embedded bytes.
package schemas

import _ "embed"

// WorkflowJSON is the text of workflow.schema.json. Treat it as read-only.
//
//go:embed workflow.schema.json
var WorkflowJSON []byte

// WorkflowID is the $id of the workflow schema.
const WorkflowID = "https://tqw.dev/schemas/workflow.schema.json"

// ValidateReportJSON is the text of validate-report.schema.json, the
// shape of `tqw-dsl validate --format json`. Treat it as read-only.
//
//go:embed validate-report.schema.json
var ValidateReportJSON []byte

// WorkflowTestJSON is the text of workflow-test.schema.json, the schema
// of the test files `tqw-dsl test` runs (NAME.test.yaml, package
// dsl/testfile). Treat it as read-only.
//
//go:embed workflow-test.schema.json
var WorkflowTestJSON []byte
