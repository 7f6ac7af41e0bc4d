// Package runstate is the vocabulary of a run as its readers see it:
// where a run is (State), how it ended (TerminalStatus, Outcome), what it
// cost (Totals), the status the runtime reads from durable records
// (Status), how runs are selected for a listing (ListOptions), and the
// names a run goes by, with their checks: its id (ValidateRunID,
// ErrInvalidRunID) and labels (ValidateLabels, ErrInvalidLabel). The
// runtime writes and reads runs (Runtime.Submit, Status, ListRuns,
// Inspector); the inbox (runtime/remote), the interpreter, the server
// and the CLI pass these values on unchanged. Outcome's MessagePack field
// tags are the format of the notification job a terminal hook receives,
// so they never change.
//
// Cost in object-store requests: none; the package holds types and
// constants only and imports only the standard library.
package runstate
