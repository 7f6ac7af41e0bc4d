package file

import (
	"fmt"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/objstoretest"
)

// TestContractNamedTemps runs the contract on the fallback for file
// systems without O_TMPFILE: create-only Puts through named temp files.
func TestContractNamedTemps(t *testing.T) {
	open := func(t *testing.T) objstore.Store {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.tmpfile = false
		return s
	}
	objstoretest.Run(t, open)
	t.Run("FolderChurn", func(t *testing.T) { objstoretest.RunFolderChurn(t, open(t)) })
}

// TestContractPacked runs the contract on a store whose top folder is
// packed: its keys of one segment live in the log, deeper ones in files,
// so List merges both. Tiny segments make the runs rotate, retire and
// compact segments all along.
func TestContractPacked(t *testing.T) {
	for _, size := range []int64{0, 4096} {
		t.Run(fmt.Sprintf("segment=%d", size), func(t *testing.T) {
			open := func(t *testing.T) objstore.Store { return packAt(t, t.TempDir(), "", size) }
			objstoretest.Run(t, open)
			t.Run("FolderChurn", func(t *testing.T) { objstoretest.RunFolderChurn(t, open(t)) })
		})
	}
}
