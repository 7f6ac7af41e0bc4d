package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime"
)

// Job is a typed task: the input struct implements it. The input is
// encoded as JSON (exported fields), so it must round-trip through
// encoding/json; so must Out.
type Job[Out any] interface {
	// JobName names the job type: 1 to 64 characters of [A-Za-z0-9._-].
	JobName() string
	// Run does the work. It may run more than once for one submission
	// (at-least-once delivery): make it idempotent or memoize through
	// jc.Memo.
	Run(ctx context.Context, jc JobContext) (Out, error)
}

// Idempotent is implemented by inputs that carry an idempotency key. Jobs
// with the same name and key are one job: see the package documentation.
type Idempotent interface {
	IdempotencyKey() string
}

// Class says how a job's error is treated.
type Class uint8

const (
	// Transient errors are retried with backoff until the attempts run out.
	Transient Class = iota + 1
	// Permanent errors fail the job at once.
	Permanent
)

// String returns the lower-case name of the class.
func (c Class) String() string {
	switch c {
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Classifier is implemented by inputs that classify their own errors; it
// overrides the default (Permanent for errors built with PermanentError or
// runtime.Permanent, Transient otherwise).
type Classifier interface {
	ClassifyError(err error) Class
}

// Coder is implemented by job errors that carry a machine-readable code;
// the code reaches the awaiter in Failure.Code.
type Coder interface {
	ErrorCode() string
}

// Detailer is implemented by job errors that carry structured detail; its
// JSON encoding reaches the awaiter in Failure.Detail (see DecodeDetail).
type Detailer interface {
	ErrorDetail() any
}

// PermanentError marks err as permanent: the job fails without retrying.
func PermanentError(err error) error { return runtime.Permanent(err) }

// classify applies the input's Classifier or the default rule.
func classify(in any, err error) Class {
	if c, ok := in.(Classifier); ok {
		if k := c.ClassifyError(err); k == Permanent || k == Transient {
			return k
		}
	}
	if runtime.IsPermanent(err) {
		return Permanent
	}
	return Transient
}

// JobContext is what a running job sees of the runtime.
type JobContext struct {
	// ID is the job id (the run id).
	ID string
	// Name is the job type's name.
	Name string
	// Attempt counts deliveries, starting at 1; MaxAttempts is the limit.
	Attempt, MaxAttempts int
	// Memo caches expensive side effects across attempts of this job.
	Memo *memo.Memo
	// Lease extends the delivery's lease for long jobs.
	Lease *runtime.Lease
	// Effects stages caller-KV writes committed with the job's outcome.
	Effects *runtime.Effects
	// KV reads committed caller-KV state.
	KV runtime.KVReader
}

// Sentinel errors; match them with errors.Is.
var (
	// ErrNotDone reports a FetchResult of a job that has not finished.
	ErrNotDone = errors.New("jobs: job not finished")
	// ErrNotFound reports a job id with neither an active run nor a record.
	ErrNotFound = errors.New("jobs: job not found")
	// ErrUnknownJob reports a job type that is not registered.
	ErrUnknownJob = errors.New("jobs: job type not registered")
	// ErrInvalidName reports a job name Register cannot use.
	ErrInvalidName = errors.New("jobs: invalid job name")
	// ErrJobFailed matches a *Failure of a failed job.
	ErrJobFailed = errors.New("jobs: job failed")
	// ErrJobCancelled matches a *Failure of a cancelled job.
	ErrJobCancelled = errors.New("jobs: job cancelled")
	// ErrInputMismatch is runtime.ErrInputMismatch: a job id (idempotency
	// key) reused with a different input.
	ErrInputMismatch = runtime.ErrInputMismatch
)

// Failure is the error Await and FetchResult return for a job that did not
// succeed. errors.Is(f, ErrJobFailed) or ErrJobCancelled tells which.
type Failure struct {
	// Job and ID name the job type and the job.
	Job, ID string
	// Cancelled is true for a cancelled job, false for a failed one.
	Cancelled bool
	// Class is Permanent for an error classified permanent (or a job the
	// queue dead-lettered), Transient when retries ran out.
	Class Class
	// Message is the job's error message.
	Message string
	// Code is the error's ErrorCode, when it implements Coder.
	Code string
	// Detail is the JSON of the error's ErrorDetail, when it implements
	// Detailer.
	Detail []byte
	// Attempts is how many times the job ran.
	Attempts int
}

// Error describes the failure.
func (f *Failure) Error() string {
	what := "failed"
	if f.Cancelled {
		what = "was cancelled"
	}
	s := fmt.Sprintf("jobs: job %s (%s) %s", f.ID, f.Job, what)
	if f.Code != "" {
		s += " [" + f.Code + "]"
	}
	if f.Message != "" {
		s += ": " + f.Message
	}
	return s
}

// Is matches ErrJobFailed or ErrJobCancelled.
func (f *Failure) Is(target error) bool {
	if f.Cancelled {
		return target == ErrJobCancelled
	}
	return target == ErrJobFailed
}
