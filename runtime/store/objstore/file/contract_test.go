package file_test

import (
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/objstoretest"
)

func openTemp(t *testing.T) *file.Store {
	t.Helper()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return openTemp(t) })
}

func TestFolderChurn(t *testing.T) { objstoretest.RunFolderChurn(t, openTemp(t)) }
