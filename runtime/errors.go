package runtime

import (
	"errors"

	"github.com/tqw-dsl/tqw/runtime/memo"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrInputMismatch reports a Submit that reuses the run id of an active
	// run with a different input. Choose a fresh run id for a new run.
	ErrInputMismatch = errors.New("runtime: run id already used by an active run with a different input")
	// ErrRunNotFound reports a run id with neither an active run nor a
	// retained terminal record.
	ErrRunNotFound = errors.New("runtime: run not found")
	// ErrReserved reports a header under "workflow." or a KV key under
	// "workflow/": those names belong to the runtime.
	ErrReserved = errors.New("runtime: reserved name")
	// ErrValueTooLarge reports a KV value over queue.MaxKVValueSize.
	ErrValueTooLarge = errors.New("runtime: value too large")
	// ErrInvalidKey reports an empty KV key or memo key (the memo's own
	// sentinel, memo.ErrInvalidKey).
	ErrInvalidKey = memo.ErrInvalidKey
	// ErrRunCancelled is the cause of a step context cancelled by Cancel.
	ErrRunCancelled = errors.New("runtime: run cancelled")
	// ErrShutdown is the cause of a step context cancelled by worker shutdown.
	ErrShutdown = errors.New("runtime: worker shutting down")
	// ErrCorruptRecord reports a runtime record in the KV namespace that
	// failed to decode.
	ErrCorruptRecord = errors.New("runtime: corrupt record")
	// ErrRecordExists reports a control record (BufferSignal,
	// ClearSignalWith) whose key already holds one: an earlier attempt
	// applied the operation, and nothing was written.
	ErrRecordExists = errors.New("runtime: control record exists")
)

// Errors the runtime reports in a message but no caller branches on: a
// programming error of a runner, which fails its run or its call.
var (
	// errInvalidOutcome reports a StepOutcome the runtime cannot apply; the
	// run fails as with a permanent step error.
	errInvalidOutcome = errors.New("runtime: invalid step outcome")
	// errEffectConflict reports a key staged for both a put and a delete in
	// one step.
	errEffectConflict = errors.New("runtime: key staged for both put and delete")
)
