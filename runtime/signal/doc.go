// Package signal holds the vocabulary of the runtime's durable signals:
// what sending one did (Outcome, Result), how to send it (Options), the
// check a runner applies before one is accepted (Validator), the listing
// of buffered signals (Info, ListOptions), their limits and their
// sentinel errors. The runtime implements them (Runtime.Signal,
// SendSignal, ListSignals; the guarantees are in its package doc,
// "Durable signals"); the inbox (runtime/remote), the interpreter and
// the server share these types with it.
//
// Cost in object-store requests: none; the package holds types,
// constants and errors only, and imports the queue only for its value
// limit.
package signal
