// Package builtin assembles the registry of built-in actions (http, llm
// and, when enabled, shell) that the interpreter and the CLI use.
//
// It is a package of its own, rather than a function in package actions,
// because the built-in actions import package actions for Call and Error;
// a function there that constructed them would be an import cycle.
//
// Costs: none; New only builds values. Not done here: wait_signal and
// sleep, which need the durable runtime and belong to the interpreter.
package builtin
