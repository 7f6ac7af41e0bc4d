package jobs

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// ErrCorruptRecord reports an outcome record that failed to decode.
var ErrCorruptRecord = errors.New("jobs: corrupt outcome record")

// record is a job's outcome, at "<prefix>results/<id>". It is a MessagePack
// map with short names; fields are only ever added.
type record struct {
	Name      string                  `msgpack:"n"`
	InputHash []byte                  `msgpack:"h"`
	Status    runstate.TerminalStatus `msgpack:"s"`
	Output    []byte                  `msgpack:"o,omitempty"` // JSON
	Message   string                  `msgpack:"m,omitempty"`
	Class     Class                   `msgpack:"k,omitempty"`
	Code      string                  `msgpack:"c,omitempty"`
	Detail    []byte                  `msgpack:"d,omitempty"` // JSON
	Attempts  int                     `msgpack:"a,omitempty"`
	FinishMs  int64                   `msgpack:"f"`
}

func encodeRecord(r *record) ([]byte, error) {
	b, err := msgpack.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode outcome record: %w", err)
	}
	return b, nil
}

// decodeRecord decodes and validates an outcome record, checking its
// lengths and nesting first (see internal/msgpackcheck).
func decodeRecord(b []byte) (*record, error) {
	var rec record
	if err := msgpackcheck.Unmarshal(b, &rec, msgpackcheck.Options{}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	switch {
	case rec.Status < runstate.Succeeded || rec.Status > runstate.Cancelled:
		return nil, fmt.Errorf("%w: status %d", ErrCorruptRecord, rec.Status)
	case rec.Name == "":
		return nil, fmt.Errorf("%w: no job name", ErrCorruptRecord)
	case len(rec.InputHash) != 0 && len(rec.InputHash) != 32:
		return nil, fmt.Errorf("%w: input hash of %d bytes", ErrCorruptRecord, len(rec.InputHash))
	case rec.Status == runstate.Succeeded && !json.Valid(rec.Output):
		return nil, fmt.Errorf("%w: output is not JSON", ErrCorruptRecord)
	}
	return &rec, nil
}

// failure turns a non-success record of job id into a *Failure.
func (r *record) failure(id string) *Failure {
	cls := r.Class
	if cls == 0 {
		cls = Permanent
	}
	return &Failure{Job: r.Name, ID: id, Cancelled: r.Status == runstate.Cancelled, Class: cls,
		Message: r.Message, Code: r.Code, Detail: r.Detail, Attempts: r.Attempts}
}

// DecodeDetail decodes the Detail of the *Failure in err's chain into a T.
// It reports false when err carries no Failure with a detail.
func DecodeDetail[T any](err error) (T, bool, error) {
	var zero T
	var f *Failure
	if !errors.As(err, &f) || len(f.Detail) == 0 {
		return zero, false, nil
	}
	var v T
	if err := json.Unmarshal(f.Detail, &v); err != nil {
		return zero, true, fmt.Errorf("jobs: decode failure detail of job %s as %T: %w", f.ID, v, err)
	}
	return v, true, nil
}
