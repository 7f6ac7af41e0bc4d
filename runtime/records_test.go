package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// hostileRecords are durable records whose declared lengths, counts or
// nesting exceed what their bytes hold: the MessagePack library allocates
// toward declared lengths (and its pooled decoders keep the buffer) before
// it finds the input short.
var hostileRecords = map[string][]byte{
	"bin32 input hash":       []byte("\x81\xa1h\xc6\xff\xff\xff\xff"),
	"bin32 replay payload":   []byte("\x81\xa1p\xc6\x7f\xff\xff\xff"),
	"str32 nonce":            []byte("\x81\xa1n\xdb\xff\xff\xff\xf0"),
	"map32 headers":          []byte("\x81\xa2hd\xdf\x00\x0f\xff\xff"),
	"array32 kv puts":        []byte("\x81\xa2kp\xdd\x00\x0f\xff\xff"),
	"ext32 in unknown field": []byte("\x81\xa1x\xc9\xc9\xc9\xc9\xc9\xc9"),
	"time ext32":             []byte("\x81\xa1t\xc9\xff\xff\xff\xff\xff"),
}

// Every record decoder turns a hostile record into ErrCorruptRecord with
// memory in proportion to its size, however often it is decoded.
func TestHostileRecordsAllocateLittle(t *testing.T) {
	for name, in := range hostileRecords {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 4*len(in), func() {
				for range 4 {
					for what, err := range map[string]error{
						"run record":    second(decodeRunRecord(in)),
						"step pointer":  second(decodeStepPointer(in)),
						"result record": second(decodeResultRecord(in)),
						"replay record": second(decodeReplayRecord(in)),
						"notification":  second(decodeRunOutcome(in)),
					} {
						if !errors.Is(err, ErrCorruptRecord) {
							t.Fatalf("%s: %v; want ErrCorruptRecord", what, err)
						}
					}
				}
			})
		})
	}
}

func second[T any](_ T, err error) error { return err }

// A hostile memo entry counts as absent, as a corrupt one does: it is
// recomputed and overwritten, with memory in proportion to its size.
func TestHostileMemoEntryIsRecomputed(t *testing.T) {
	ctx := context.Background()
	ms := memo.NewStore(mem.New(), memo.DefaultPrefix, runstate.ValidateRunID)
	m := ms.Step("run", 1)
	type answer struct{ Body []byte }
	in := []byte("\x81\xa4Body\xc6\xff\xff\xff\xff")
	if err := m.Put(ctx, "k", in); err != nil {
		t.Fatal(err)
	}
	calls := 0
	var got answer
	allocbound.Check(t, len(in), func() {
		var err error
		got, err = memo.Memoized(ctx, m, "k", func(context.Context) (answer, error) { calls++; return answer{Body: []byte("t")}, nil })
		if err != nil {
			t.Fatal(err)
		}
	})
	if calls != 1 || string(got.Body) != "t" {
		t.Fatalf("computed %d times, got %+v", calls, got)
	}
}
