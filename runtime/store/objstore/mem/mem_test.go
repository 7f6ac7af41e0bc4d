package mem_test

import (
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/objstoretest"
)

func TestContract(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return mem.New() })
}

func TestFolderChurn(t *testing.T) { objstoretest.RunFolderChurn(t, mem.New()) }

func TestNamedShared(t *testing.T) {
	a, b, c := mem.Named("x"), mem.Named("x"), mem.Named("y")
	if a != b || a == c {
		t.Fatal("Named does not share by name")
	}
}
