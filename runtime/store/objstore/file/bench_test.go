package file_test

import (
	"fmt"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// BenchmarkPut measures one Put of a WAL-sized object: create-only of a
// fresh key (a WAL write) and an overwrite of one of 100 keys. The folder
// is the test's temp folder, so the figures depend on its file system.
func BenchmarkPut(b *testing.B) {
	data := make([]byte, 1024)
	for _, mode := range []string{"create", "overwrite"} {
		b.Run(mode, func(b *testing.B) {
			s, err := file.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(len(data)))
			i := 0
			for b.Loop() {
				var err error
				if mode == "create" {
					_, err = s.Put(bg, fmt.Sprintf("wal/%020d", i), data, objstore.CreateOnly())
				} else {
					_, err = s.Put(bg, fmt.Sprintf("obj/%03d", i%100), data, objstore.PutOptions{})
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
