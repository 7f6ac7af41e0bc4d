package server

import (
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/server/wire"
)

// The engine's types as the API's bodies (package wire, which depends on
// none of them) carry them: field for field, so the bytes are those the
// engine's own JSON encoding gives (TestWireConversionsEncodeAsTheEngine).

// wireDiagnostics is never nil: a report without diagnostics has [].
func wireDiagnostics(ds dsl.Diagnostics) []wire.Diagnostic {
	out := make([]wire.Diagnostic, 0, len(ds))
	for _, d := range ds {
		out = append(out, wire.Diagnostic{File: d.File, Line: d.Line, Col: d.Col, EndLine: d.EndLine, EndCol: d.EndCol,
			Severity: string(d.Severity), Code: d.Code, Message: d.Message, Hint: d.Hint})
	}
	return out
}

func wireErrorInfo(e *dsl.ErrorInfo) *wire.ErrorInfo {
	if e == nil {
		return nil
	}
	return &wire.ErrorInfo{Type: e.Type, Message: e.Message, Status: e.Status, Retryable: e.Retryable}
}

func wireRejectedSignal(r *interpreter.RejectedSignal) *wire.RejectedSignal {
	if r == nil {
		return nil
	}
	return &wire.RejectedSignal{Key: r.Key, Size: r.Size, Reason: r.Reason}
}

func wireStepEvent(ev interpreter.Event) wire.StepEvent {
	return wire.StepEvent{Time: ev.Time, RunID: ev.RunID, Step: ev.Step, Kind: ev.Kind, Attempt: ev.Attempt, Status: ev.Status,
		ElapsedNS: int64(ev.Elapsed), Error: wireErrorInfo(ev.Error), Next: ev.Next, Job: ev.Job}
}
