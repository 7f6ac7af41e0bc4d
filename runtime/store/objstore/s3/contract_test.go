package s3_test

import (
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/objstoretest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
)

func testConfig(t *testing.T) s3.Config { return s3test.Config(t) }

func TestContract(t *testing.T) {
	testConfig(t) // skip once, not per subtest
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return s3test.Open(t) })
}
