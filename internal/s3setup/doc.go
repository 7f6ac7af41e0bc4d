// Command s3setup creates the test bucket on the local S3 server that
// scripts/test.sh starts. It waits until the server answers (up to
// -wait), then creates the bucket if it is missing. It reads the same
// TQW_TEST_S3_* variables the tests read.
package main
