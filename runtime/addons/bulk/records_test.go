package bulk

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/internal/allocbound"
)

// hostileRecords are batch and item records whose declared lengths or
// counts exceed the record: the MessagePack library allocates toward them
// (a pooled decoder keeps the grown buffer) before it finds the input short.
var hostileRecords = map[string][]byte{
	"bin32 item input":       []byte("\x81\xa2in\xc6\xff\xff\xff\xff"),
	"map32 costs":            []byte("\x81\xa1c\xdf\xff\xff\xff\xff"),
	"str32 error":            []byte("\x81\xa1e\xdb\xff\xff\xff\xf0"),
	"ext32 in unknown field": []byte("\x81\xa1x\xc9\xc9\xc9\xc9\xc9\xc9"),
	"deep nesting":           append([]byte("\x81\xa1x"), make91(200_000)...),
}

func make91(n int) []byte {
	b := make([]byte, n+1)
	for i := range n {
		b[i] = 0x91 // a list of one list of one ...
	}
	b[n] = 0xc0
	return b
}

// A hostile record is ErrCorruptRecord and costs memory in proportion to
// its size, however often it is decoded.
func TestHostileRecordsAllocateLittle(t *testing.T) {
	for name, in := range hostileRecords {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 8*len(in), func() {
				for range 4 {
					if _, err := decodeItem(in); !errors.Is(err, ErrCorruptRecord) {
						t.Fatalf("decodeItem = %v; want ErrCorruptRecord", err)
					}
					if _, err := decodeMeta(in); !errors.Is(err, ErrCorruptRecord) {
						t.Fatalf("decodeMeta = %v; want ErrCorruptRecord", err)
					}
				}
			})
		})
	}
}
