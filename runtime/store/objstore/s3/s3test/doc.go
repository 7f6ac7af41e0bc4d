// Package s3test connects tests to the S3 server that `make test`
// (scripts/test.sh) starts, or to one named by the TQW_TEST_S3_* variables:
// Config and Open give each test a store under a prefix of its own in the
// shared bucket, and skip the test with a message naming `make test` when
// no server is configured.
//
// It makes no request itself (the store Open returns costs what s3 says).
// It creates no bucket and deletes nothing: test prefixes stay in the
// bucket, which the test script's server keeps in a temporary folder.
package s3test
