package signal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Outcome reports what Runtime.Signal did.
type Outcome uint8

const (
	// Delivered means a waiting run was woken with the payload.
	Delivered Outcome = iota + 1
	// Buffered means no waiter was woken; the signal is held durably under
	// its key for the next waiter, replacing any earlier buffered signal,
	// until the signal retention drops it (runtime.Options.SignalRetention). A waiter
	// registering at the same moment may still pick it up at once:
	// Buffered never loses a signal, but may under-report delivery.
	Buffered
)

// String returns "delivered" or "buffered".
func (o Outcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Buffered:
		return "buffered"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MaxKeyLen bounds a signal key, in bytes.
const MaxKeyLen = 512

// CheckKey reports a key no signal may carry (an error wrapping
// ErrInvalidKey that says what is wrong): empty, over MaxKeyLen bytes, not
// UTF-8, holding a control character (NUL included), or an empty, "." or
// ".." segment between slashes. Keys travel in URL paths (POST
// /v1/signals/{key}), logs and terminals, where such keys are rewritten
// or misread. Every way of sending or waiting on a signal calls it.
func CheckKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why) }
	switch {
	case key == "":
		return bad("empty")
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("%d bytes; the limit is %d", len(key), MaxKeyLen))
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return bad(fmt.Sprintf("control character %U at byte %d", r, i))
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad(fmt.Sprintf("an empty, \".\" or \"..\" segment between slashes (%q); keys are not paths", seg))
		}
	}
	return nil
}

// MaxPayload bounds a signal's payload: a caller-KV value less the
// format byte and the buffering time stored before it.
const MaxPayload = queue.MaxKVValueSize - 1 - 8

// DefaultRetention is how long a buffered signal waits for a step to
// wait on its key before the retention sweep drops it.
const DefaultRetention = 7 * 24 * time.Hour

// Sentinel errors of signals; match them with errors.Is.
var (
	// ErrRejected reports a payload the Validator refused;
	// nothing was written.
	ErrRejected = errors.New("runtime: signal payload rejected")
	// ErrNoWaiter reports a signal sent with Options.RequireWaiting
	// while no step waits on its key; nothing was written.
	ErrNoWaiter = errors.New("runtime: no step is waiting on the signal key")
	// ErrInvalidKey reports a correlation key CheckKey refuses.
	ErrInvalidKey = errors.New("runtime: invalid signal key")
)

// Validator checks a signal before it is buffered or delivered, so
// a payload the waiting step would refuse is refused to its sender
// instead. A StepRunner that implements it is the runtime's validator
// unless runtime.Options.SignalValidator sets another; Runtime.Signal,
// SendSignal and
// the inbox (runtime/remote, through AdmitSignal) all consult it, so every
// way of sending a signal behaves the same.
//
// ValidateSignal returns nil to accept the payload, an error wrapping
// ErrRejected to refuse it (its text is what the sender sees: say
// what is wrong), and any other error when it could not decide (a store
// error): the signal is then not sent, and the inbox retries it. It must
// not write. It runs before every signal, so it must be cheap for keys it
// knows nothing of.
type Validator interface {
	ValidateSignal(ctx context.Context, key string, payload []byte) error
}

// Options adjust Runtime.SendSignal.
type Options struct {
	// RequireWaiting refuses the signal with ErrNoWaiter, writing nothing,
	// when no step is registered as waiting on the key, instead of
	// buffering it. A step whose registration is settling at that moment
	// does not count as waiting yet.
	RequireWaiting bool
}

// Result is what Runtime.SendSignal did.
type Result struct {
	Outcome Outcome
	// Expires is when a Buffered signal is dropped unless a step waits on
	// its key first: the buffering time plus the signal retention in force
	// on the writer. Zero when delivered, or when the writer keeps
	// buffered signals until they are consumed.
	Expires time.Time
}

// Info is a signal held under its key for the next step that
// waits on it.
type Info struct {
	Key string
	// Size is the payload's length in bytes.
	Size int
	// BufferedAt is when it was buffered; zero for a signal buffered by a
	// version that did not record it.
	BufferedAt time.Time
}

// ListOptions select buffered signals for Runtime.ListSignals and
// Inspector.ListSignals.
type ListOptions struct {
	// After lists keys that sort after it.
	After string
	// Limit caps the result; 0 means 100.
	Limit int
}
