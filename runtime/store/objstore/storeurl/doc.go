// Package storeurl opens an objstore.Store from a URL:
//
//	mem://NAME                                   in-process, shared by NAME
//	file://PATH                                  local folder: file://.tqw (relative) or file:///tmp/x (absolute)
//	s3://BUCKET/PREFIX?endpoint=HOST:PORT&region=R&insecure=1
//
// s3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
// Opening costs no request on any backend; file creates its folder and
// removes temp files of dead writers.
package storeurl
