// Package objstoretest is the contract every objstore.Store backend must
// keep. A backend's tests call Run with a function that opens a fresh,
// empty store; the same suite then checks every method's semantics,
// pagination, preconditions, errors, context cancellation and two races
// (racing create-only writers; an If-Match counter) on mem, file and s3.
//
// The suite makes a few thousand requests per run, most of them in the two
// races. It never stores both "a" and "a/b": file-system backends (file,
// and versitygw's posix backend behind s3) cannot hold both.
//
// It imports objstore only, never a backend: the connection to the S3 test
// server lives in s3/s3test.
package objstoretest
