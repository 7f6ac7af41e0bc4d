package interpreter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl/duration"
	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// stateVersion is the format of the Continue payload.
const stateVersion = 1

// Phases of a step that waits: the step is entered again when the wait
// ends, with the phase saying what it waited for.
const (
	phaseRun    uint8 = iota // run the step
	phaseSlept               // a sleep ended
	phaseSignal              // a wait_signal ended (Step.Signal, nil on timeout)
	phaseCall                // a call's child ended (Step.Signal, nil on timeout)
	phaseJoin                // a parallel or map child rang (Step.Signal, nil on timeout)
)

// mapItem is what a map item's steps read as item and index.
type mapItem struct {
	V any `msgpack:"v"`
	I int `msgpack:"i"`
}

// state is the run's state between two steps: the Continue payload.
// Fields are only ever added, as optional ones.
type state struct {
	V     int            `msgpack:"v"`
	Def   string         `msgpack:"d"`
	Pin   *pin           `msgpack:"p,omitempty"`
	Input any            `msgpack:"i"`
	Vars  map[string]any `msgpack:"vs,omitempty"`
	// Init is true once the initial vars were evaluated.
	Init bool `msgpack:"in,omitempty"`
	// Step is the index of the current DSL step.
	Step int `msgpack:"s"`
	// Attempt is the current step's attempt, from 1.
	Attempt int `msgpack:"a,omitempty"`
	// Visit is the runtime step number at which the current step was
	// entered (kept across its retries): memo entries are keyed by it.
	Visit int `msgpack:"vi,omitempty"`
	// Prev is the id of the step whose output `output` names in a step
	// that runs nothing; "" when that step left none.
	Prev  string `msgpack:"o,omitempty"`
	Phase uint8  `msgpack:"ph,omitempty"`
	// WaitKey is the signal key a waiting step registered.
	WaitKey string `msgpack:"wk,omitempty"`
	// Child is the run id a call step started.
	Child string `msgpack:"ch,omitempty"`
	// Started is when the waiting step began (Unix ms), for durations.
	Started int64 `msgpack:"st,omitempty"`
	// Deadline is when a wait_signal's wait times out (Unix ms), kept
	// while it waits on after setting a signal aside.
	Deadline int64 `msgpack:"dl,omitempty"`
	// Block is the path of the block Step indexes ("" the top level; a
	// branch or map item child runs its block of the parent's definition).
	Block string `msgpack:"b,omitempty"`
	// Up are the runs that execute the blocks around Block, innermost
	// first (a branch's parent, its parent's parent, ...): steps.X of an
	// enclosing block is read from the run that executes it.
	Up []string `msgpack:"up,omitempty"`
	// Item is a map item's item and index (inherited by blocks inside it).
	Item *mapItem `msgpack:"it,omitempty"`
	// Map is a map step's cursor while it runs.
	Map *mapCursor `msgpack:"mp,omitempty"`
	// RunDeadline is when the run's steps must have ended (Unix ms; 0:
	// the workflow has no timeout): its submission plus the timeout,
	// fixed at its first step (deadline.go).
	RunDeadline int64 `msgpack:"rd,omitempty"`
	// Capped says the wait this state was scheduled with was cut short
	// at its block's deadline: a wake by its timer is that deadline's.
	Capped bool `msgpack:"cp,omitempty"`
	// End is how the run ends once its handlers ran; set while they run
	// (handlers.go).
	End *runEnd `msgpack:"en,omitempty"`
	// HandlerDeadline is when the handler block the run is in must have
	// ended (Unix ms).
	HandlerDeadline int64 `msgpack:"hd,omitempty"`
	// Skip is set by a redrive that skips the current step (redrive.go).
	Skip *skipRecord `msgpack:"sk,omitempty"`
	// Start rides a fork's first payload only: its first history record
	// keeps it (fork.go).
	Start *runStart `msgpack:"s0,omitempty"`
	// InputRef is the KV record holding the run's input, for a branch or
	// map item: its payload does not repeat the parent's input (Input is
	// left out when encoded, and read back when a step opens).
	InputRef string `msgpack:"ir,omitempty"`
}

// resetWait clears what a step keeps while it waits (on a timer, a
// signal, children), for a step entered afresh: the next one or a retry.
func (s *state) resetWait() {
	s.Phase, s.WaitKey, s.Child, s.Started, s.Deadline, s.Capped, s.Map = phaseRun, "", "", 0, 0, false, nil
}

func encodeMsgpack(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true) // equal states encode to equal bytes
	enc.SetCustomStructTag("msgpack")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("interpreter: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// decodeMsgpack decodes a stored record, checking its lengths and nesting
// first (see internal/msgpackcheck): states and outputs carry user values,
// which nest as deep as actions.Normalize allows.
func decodeMsgpack(b []byte, v any) error {
	// Numbers in interface values decode as int64, uint64 or float64.
	opts := msgpackcheck.Options{MaxDepth: msgpackcheck.MaxDepth, LooseInterfaces: true}
	if err := msgpackcheck.Unmarshal(b, v, opts); err != nil {
		return fmt.Errorf("%w: %T: %w", ErrCorruptState, v, err)
	}
	return nil
}

func (s *state) encode() ([]byte, error) {
	if s.InputRef != "" && s.Input != nil {
		c := *s
		c.Input = nil
		return encodeMsgpack(&c)
	}
	return encodeMsgpack(s)
}

func decodeState(b []byte) (*state, error) {
	var s state
	if err := decodeMsgpack(b, &s); err != nil {
		return nil, err
	}
	if s.V != stateVersion {
		return nil, fmt.Errorf("%w: state format %d, this build reads %d", ErrCorruptState, s.V, stateVersion)
	}
	if s.Def == "" || s.Step < 0 {
		return nil, fmt.Errorf("%w: state without definition or with step %d", ErrCorruptState, s.Step)
	}
	return &s, nil
}

// plain converts a value produced by expressions or actions into the
// JSON-compatible values outputs and vars hold: maps, lists, strings,
// bools, int64, float64 and nil. Times become RFC 3339 text, durations the
// DSL's notation.
func plain(v any) (any, error) { return actions.NormalizeWith(v, plainOther) }

// plainOther converts, for actions.NormalizeWith, what actions.Normalize
// rejects: times, durations, bytes, unsigned integers past int64, other
// slices, arrays and string-keyed maps, named strings, and the rest (structs
// and the like) as encoding/json sees them.
func plainOther(v any) (any, error) {
	switch x := v.(type) {
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case time.Duration:
		return duration.Format(x), nil
	case []byte:
		return string(x), nil
	case uint: // only past math.MaxInt64: Normalize takes the rest
		return float64(x), nil
	case uint64:
		return float64(x), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = rv.Index(i).Interface()
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		out := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			out[iter.Key().String()] = iter.Value().Interface()
		}
		return out, nil
	case reflect.String:
		return rv.String(), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("a value of type %T cannot be stored: %w", v, err)
	}
	return DecodeJSON(b)
}

// DecodeJSON decodes one JSON document into plain values (integers as
// int64, other numbers as float64).
func DecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("unexpected data after the JSON value")
	}
	return plain(v)
}

// toJSON renders a plain value as JSON with sorted keys.
func toJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("interpreter: render output as JSON: %w", err)
	}
	return b, nil
}
