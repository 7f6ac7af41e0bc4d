// Package netfault is a TCP proxy for tests that cut the network between
// a process and a server it uses (an S3 server) and bring it back, the
// way an outage or a partition looks from the client: connections reset,
// new ones refused, no byte passes while it is down.
//
// It makes no object-store request of its own; it forwards bytes.
package netfault
