// Package procid names a process so another process can tell, later and
// on the same machine, whether it is still alive: host name, boot id, pid
// and the process's start time (which tells a reused pid apart).
//
// Guarantees: Dead reports true only when the named process certainly
// exited: same host and boot with the pid gone or taken by a later
// process, or the same host booted since. On another host, or where the
// facts are unavailable (no /proc), it reports that it cannot tell, never
// a guess. It makes no object-store request; on Linux it reads
// /proc/sys/kernel/random/boot_id and /proc/<pid>/stat.
package procid
