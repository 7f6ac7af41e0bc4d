package runstate

import (
	"fmt"
	"time"
)

// State is where a run is.
type State uint8

// Run states. The first five are active, the last three terminal.
const (
	// StatePending: the current step is claimable.
	StatePending State = iota + 1
	// StateRunning: a worker holds the current step.
	StateRunning
	// StateWaiting: the current step waits for a signal (Status.SignalKey)
	// until Status.Until.
	StateWaiting
	// StateScheduled: the current step is scheduled for Status.Until
	// (a ContinueAfter delay or a retry backoff).
	StateScheduled
	// StateCancelling: Cancel was requested and the running step has not
	// returned yet.
	StateCancelling
	// StateSucceeded: terminated with Succeed (Status.Result).
	StateSucceeded
	// StateFailed: terminated by Fail or a step error (Status.Error).
	StateFailed
	// StateCancelled: terminated by CancelRun or Cancel.
	StateCancelled
)

var stateNames = map[State]string{
	StatePending: "pending", StateRunning: "running", StateWaiting: "waiting", StateScheduled: "scheduled",
	StateCancelling: "cancelling", StateSucceeded: "succeeded", StateFailed: "failed", StateCancelled: "cancelled",
}

// String returns the lower-case name of the state.
func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("RunState(%d)", uint8(s))
}

// Terminal reports whether s is Succeeded, Failed or Cancelled.
func (s State) Terminal() bool { return s >= StateSucceeded }

// State returns the run state of a run that ended with s.
func (s TerminalStatus) State() State {
	switch s {
	case Succeeded:
		return StateSucceeded
	case Failed:
		return StateFailed
	}
	return StateCancelled
}

// Status is a run's state as read from durable records.
type Status struct {
	RunID string
	State State
	// Step is the current step (active) or the terminating step (terminal).
	Step int
	// JobID is the current step's queue job (active runs).
	JobID string
	// Attempt counts deliveries of the current step so far.
	Attempt int
	// SignalKey is the awaited correlation key (StateWaiting).
	SignalKey string
	// Until is when a waiting or scheduled step becomes claimable.
	Until time.Time
	// LastError is the current step's last error (a retry in progress).
	LastError string
	// Result, ResultOmitted and Error describe a terminated run.
	Result        []byte
	ResultOmitted bool
	Error         string
	Headers       map[string]string
	// Labels are the run's labels (runtime.RunSpec.Labels).
	Labels      map[string]string
	SubmittedAt time.Time
	// FinishedAt is set for terminated runs.
	FinishedAt time.Time
	// Totals is what the run has cost so far, as of its last durable
	// settlement (nil before its first); see Totals.
	Totals *Totals
}

// ListOptions select runs for Runtime.ListRuns and Inspector.ListRuns.
type ListOptions struct {
	// After is the cursor: runs past this id in the listing's order are
	// listed (ids that sort after it, or before it when Descending).
	After string
	// Limit caps the result; 0 means 100.
	Limit int
	// States keeps only runs in these states; empty keeps all.
	States []State
	// Labels keeps only runs carrying every one of these labels. The
	// runs are found through the index of one of them (the first by
	// key), not by a scan of all runs.
	Labels map[string]string
	// Descending lists runs in descending run-id order: newest first
	// for ULIDs, the ids the runtime gives runs.
	Descending bool
}

// TerminalStatus is how a run ended.
type TerminalStatus uint8

// The three terminal states.
const (
	// Succeeded: a step returned Succeed.
	Succeeded TerminalStatus = iota + 1
	// Failed: a step returned Fail, or a step error ended the run.
	Failed
	// Cancelled: a step returned CancelRun, or Cancel ended the run.
	Cancelled
)

// Valid reports whether s is one of the three statuses.
func (s TerminalStatus) Valid() bool { return s >= Succeeded && s <= Cancelled }

// String returns the lower-case name of the status.
func (s TerminalStatus) String() string {
	switch s {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("TerminalStatus(%d)", uint8(s))
}

// Outcome describes a terminated run to a runtime.TerminalHook.
type Outcome struct {
	RunID  string         `msgpack:"id"`
	Status TerminalStatus `msgpack:"st"`
	// Result is the Succeed result; nil when ResultOmitted (over
	// runtime.MaxRetainedResult) or the run did not succeed.
	Result        []byte `msgpack:"r,omitempty"`
	ResultOmitted bool   `msgpack:"ro,omitempty"`
	// Error is the Fail or CancelRun reason, the last step error, or
	// "cancelled" for an external Cancel.
	Error string `msgpack:"e,omitempty"`
	// Step is the number of the step that terminated the run.
	Step int `msgpack:"s"`
	// Headers are the submitter's headers.
	Headers map[string]string `msgpack:"hd,omitempty"`
	// Labels are the run's labels (runtime.RunSpec.Labels).
	Labels      map[string]string `msgpack:"lb,omitempty"`
	SubmittedAt time.Time         `msgpack:"t"`
	FinishedAt  time.Time         `msgpack:"f"`
}

// Totals is what a run has cost so far.
type Totals struct {
	// Requests are the object-store requests the run caused, by kind;
	// WAL PUTs count as the run's share of each (a fraction).
	Puts, Gets, Lists, Deletes, Heads float64
	// Counters are the runner's totals (Step.AddTotal).
	Counters map[string]float64
}
