package file

import (
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
