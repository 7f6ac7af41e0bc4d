// Package storeurl opens an objstore.Store from a URL:
//
//	mem://NAME                                   in-process, shared by NAME
//	file://PATH                                  local folder: file://.tqw (relative) or file:///tmp/x (absolute)
//	s3://BUCKET/PREFIX?endpoint=HOST:PORT&region=R&insecure=1
//
// s3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
// An unusable URL (or missing credentials) is an error wrapping
// ErrInvalid, before anything is tried.
//
// Open opens a store for reading and writing. It costs no request on any
// backend; file creates its folder and removes temp files of dead writers.
//
// OpenReadOnly opens one for commands that only read: it creates and
// changes nothing (file opens with file.OpenReadOnly), every Put and
// Delete fails with ErrReadOnly, and a URL at which nothing is stored (a
// missing folder, or no object at all: a typo in the URL) fails with a
// *NoStoreError instead of reading as an empty store. It costs one LIST
// of at most one object.
package storeurl
