// Package file is the embedded default objstore.Store: each object is a
// file under a root folder, at the path its key names (key "a/b" is file
// ROOT/a/b). Files are 0600, folders 0700.
//
// Guarantees:
//   - Put is atomic and durable: data goes to a temp file in the object's
//     folder, is fsynced, then published by rename(2) (or link(2) for a
//     create-only Put), and the folder is fsynced. A process killed with
//     SIGKILL at any moment leaves the old object, the new one or none,
//     never a partial one (TestKill9 checks this across 200 kills).
//   - Create-only uses link(2), which fails if the name exists, so of any
//     number of racing creators, in this process or others, exactly one wins.
//   - If-Match, unconditional Put and Delete take a per-key lock (one of 64
//     striped lock files under ROOT/\locks, held with flock(2) and an
//     in-process lock), so compare-and-swap is linearizable across
//     processes that share the folder on one machine.
//   - ETags are a hash of the content (the first 128 bits of SHA-256),
//     cached in the user.tqw.etag extended attribute and recomputed when it
//     is absent. Like S3's, identical bytes have identical ETags, so
//     If-Match compares content: a writer whose expected bytes are still
//     there succeeds, which is what a compare-and-swap needs.
//   - List walks folders in key byte order (a folder "a" sorts as "a/", so
//     "a-b" < "a.b" < "a/x" < "a0") and reads only the folders that can hold
//     keys of the page.
//   - Temp files carry a backslash in their name, which no key may contain,
//     so Get and List never see them. Open removes those whose writer is
//     gone (dead pid, an earlier process with this pid, or older than an hour).
//
// Cost in system calls: Put = open+write+fsetxattr+fsync+close of the temp
// file, then rename (or link+unlink), then fsync of the folder; If-Match
// adds open+fgetxattr+close of the current file, and each folder created
// adds mkdir+fsync. Get = open+fstat+read+fgetxattr+close. Head is Get
// without the read. Delete = unlink+fsync, plus rmdir of emptied folders.
// List = one readdir per folder visited plus a Head per object returned.
// Open walks the whole tree once to sweep temp files.
//
// What it does not do: keys "a" and "a/b" cannot both exist (a name is a
// file or a folder); such a Put fails with ErrKeyConflict. Locks are
// flock(2) locks, so the folder must not be shared over NFS or between
// machines. Files edited in place by hand keep a stale cached ETag.
//
// OpenReadOnly opens a folder for reading only (a ReadOnly): it creates
// nothing, sweeps nothing and holds no lock file, so it works on a
// folder the process may only read and never changes a store it
// inspects; its Put and Delete fail with ErrReadOnly. Its reads cost what
// Store's do; opening costs one stat.
package file
