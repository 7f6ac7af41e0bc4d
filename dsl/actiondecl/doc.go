// Package actiondecl reads and writes action declarations: a JSON file
// (tqw-actions.json) naming the actions a program that embeds tqw
// registers besides the built-in ones, each with the JSON Schema of its
// with. A program writes it from its registry (engine.ActionDeclarations);
// `tqw-dsl validate`, `lsp` and `schema` read it (--actions FILE, else the
// nearest tqw-actions.json in the workflow's folder or a parent), so
// workflows using those actions check in editors and CI like the built-in
// ones.
//
// Guarantees: Parse refuses a file with unknown keys, another version, a
// built-in or malformed action name or a with schema that does not
// compile, naming the file and the action; Encode sorts actions by name,
// so a regenerated file changes only where a declaration did. A declared
// schema checks the with as written, as for a registered action.
//
// Cost: local file reads only; no object-store request.
package actiondecl
