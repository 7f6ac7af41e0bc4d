package s3test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
)

// S3 environment variables set by `make test` (scripts/test.sh), which
// starts a local versitygw server and creates the bucket.
const (
	EnvEndpoint  = "TQW_TEST_S3_ENDPOINT"
	EnvAccessKey = "TQW_TEST_S3_ACCESS_KEY"
	EnvSecretKey = "TQW_TEST_S3_SECRET_KEY"
	EnvBucket    = "TQW_TEST_S3_BUCKET"
)

// Config returns the configuration of the test S3 server under a prefix
// no other test or run uses. With none of the variables set the test is
// skipped with a message naming `make test`; with some but not all set it
// fails, so a broken setup never passes as a skip.
func Config(t testing.TB) s3.Config {
	t.Helper()
	names := []string{EnvEndpoint, EnvAccessKey, EnvSecretKey, EnvBucket}
	var vals, missing []string
	for _, n := range names {
		v := os.Getenv(n)
		vals = append(vals, v)
		if v == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) == len(names) {
		t.Skip("no S3 test server: run `make test`, which starts versitygw and sets TQW_TEST_S3_*")
	}
	if len(missing) > 0 {
		t.Fatalf("S3 test server partly configured: %s unset", strings.Join(missing, ", "))
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "-", " ", "_", "#", "_").Replace(t.Name())
	return s3.Config{
		Endpoint: vals[0], AccessKey: vals[1], SecretKey: vals[2], Bucket: vals[3], Insecure: true,
		Prefix: "test-" + hex.EncodeToString(rnd[:]) + "/" + name,
	}
}

// Open returns a store on the test S3 server under a fresh prefix, or
// skips as Config does.
func Open(t testing.TB) *s3.Store {
	t.Helper()
	s, err := s3.New(Config(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
