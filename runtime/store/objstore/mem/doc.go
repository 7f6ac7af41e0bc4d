// Package mem is an in-process objstore.Store for tests, demos and benchmarks.
//
// It keeps every object in a map guarded by one mutex, so each call is atomic
// and linearizable. Stores opened by name with Named share their contents
// within the process (like a bucket two clients reach), which lets tests model
// two processes on one store. Nothing survives the process.
package mem
