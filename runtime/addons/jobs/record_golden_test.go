package jobs

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// A job's outcome records as today's code writes them, from fixed
// inputs; a layout change fails TestGoldenRecord (docs/STORE-LAYOUT.md,
// "Fixtures").
func TestGoldenRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  record
	}{
		{"result-succeeded.v1.bin", record{Name: "echo", InputHash: bytes.Repeat([]byte{0xab}, 32), Status: runstate.Succeeded,
			Output: []byte(`{"a":1}`), Attempts: 1, FinishMs: 1767323045000}},
		{"result-failed.v1.bin", record{Name: "flaky", InputHash: bytes.Repeat([]byte{0xcd}, 32), Status: runstate.Failed,
			Message: "upstream said no", Class: Permanent, Code: "E_NO", Detail: []byte(`{"retry_after":30}`), Attempts: 3, FinishMs: 1767323046000}},
		{"result-cancelled.v1.bin", record{Name: "slow", Status: runstate.Cancelled, FinishMs: 1767323047000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeRecord(&tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			b = golden.Check(t, filepath.Join("testdata", "golden", tc.name), b)
			got, err := decodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.rec) {
				t.Fatalf("decoded\n %+v\nwant\n %+v", *got, tc.rec)
			}
		})
	}
}
