package file_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// BenchmarkPut measures one Put of a WAL-sized object: create-only of a
// fresh key (a WAL write), in a plain and in a packed folder, and an
// overwrite of one of 100 keys. The folder is the test's temp folder, so
// the figures depend on its file system. cpu-µs/op is the process's CPU
// (user and system), which other load on the machine does not inflate.
func BenchmarkPut(b *testing.B) {
	data := make([]byte, 1024)
	for _, mode := range []string{"create", "create-packed", "overwrite"} {
		b.Run(mode, func(b *testing.B) {
			s, err := file.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "create-packed" {
				if err := s.Pack(bg, "wal/"); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(data)))
			cpu0 := processCPU()
			i := 0
			for b.Loop() {
				var err error
				if mode == "overwrite" {
					_, err = s.Put(bg, fmt.Sprintf("obj/%03d", i%100), data, objstore.PutOptions{})
				} else {
					_, err = s.Put(bg, fmt.Sprintf("wal/%020d", i), data, objstore.CreateOnly())
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
