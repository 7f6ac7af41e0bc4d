package jobs

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/internal/allocbound"
)

// hostileRecords are outcome records whose declared lengths exceed the
// record: the MessagePack library allocates toward them before it finds
// the input short.
var hostileRecords = map[string][]byte{
	"bin32 input hash":       []byte("\x81\xa1h\xc6\xff\xff\xff\xff"),
	"bin32 output":           []byte("\x81\xa1o\xc6\x7f\xff\xff\xff"),
	"str32 name":             []byte("\x81\xa1n\xdb\xff\xff\xff\xf0"),
	"ext32 in unknown field": []byte("\x81\xa1x\xc9\xc9\xc9\xc9\xc9\xc9"),
	"array32 as name":        []byte("\x81\xa1n\xdd\x00\x0f\xff\xff"),
}

// A hostile outcome record is ErrCorruptRecord and costs memory in
// proportion to its size, however often it is decoded.
func TestHostileRecordAllocatesLittle(t *testing.T) {
	for name, in := range hostileRecords {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 8*len(in), func() {
				for range 8 {
					if _, err := decodeRecord(in); !errors.Is(err, ErrCorruptRecord) {
						t.Fatalf("decodeRecord = %v; want ErrCorruptRecord", err)
					}
				}
			})
		})
	}
}
