// Package allocbound lets tests and fuzz targets bound the heap memory a
// decoder allocates for its input, so a decoder that trusts a declared
// length fails a test instead of a production process. It is imported
// only from _test.go files and makes no object-store requests.
//
// It reads the process-wide count of heap bytes allocated, which the Go
// runtime updates exactly for large allocations and in steps of a span
// (a few KiB) for small ones; other goroutines allocating at the same
// time count too, which the slack in Limit absorbs.
package allocbound
