// Package file is the embedded default objstore.Store: each object is a
// file under a root folder, at the path its key names (key "a/b" is file
// ROOT/a/b), except in packed folders (below). Files are 0600, folders 0700.
//
// Guarantees:
//   - Put is atomic and durable: data goes to a temp file in the object's
//     folder (nameless, O_TMPFILE, for a create-only Put where the file
//     system allows), is fsynced, then published by rename(2) (or
//     linkat(2) for a create-only Put), and the folder is fsynced. A
//     process killed with SIGKILL at any moment leaves the old object, the
//     new one or none, never a partial one (TestKill9 checks this across
//     200 kills).
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
//   - Named temp files carry a backslash in their name, which no key may
//     contain, so Get and List never see them. Open removes those whose
//     writer is gone (dead pid, an earlier process with this pid, or older
//     than an hour). A nameless temp file vanishes with its writer.
//
// Cost in system calls: a create-only Put = openat(O_TMPFILE)+write+
// fsetxattr+fsync+fstat of the temp file, linkat to the key's name, close,
// fsync of the folder (where O_TMPFILE is refused: a named temp file,
// linked, then unlinked; also on a retry after racing Deletes removed the
// folder, since a named temp file keeps it from looking empty). Other
// Puts = openat of a named temp file, the
// same writes and fsync, renameat over the key under its lock, fsync of the
// folder; If-Match adds open+fgetxattr+close of the current file. Folders
// stay open (up to 256, least recently used first out), so a Put makes no
// mkdir, stat or open of its folder; opening one costs an open, creating
// one mkdir+fsync of its parent per level. A folder removed by another
// process is noticed when the kernel refuses to create a name in it, and
// opened again. Get = openat+fstat+read+fgetxattr+close. Head is Get
// without the read. Delete = unlinkat+fsync, plus rmdir of emptied
// folders. List = one readdir per folder visited plus a Head per object
// returned. Every Get, Head, Put and Delete also asks whether the key's
// folder is packed: an fstatat of its \log and an fstat of the folder
// (none once it is known packed, which it then stays). Open walks the
// whole tree once to sweep temp files.
//
// # Packed folders
//
// A durable Put costs two flushes (the file, then the folder) and a new
// inode; on the disks tqw runs on that is most of a WAL commit. Store.Pack
// (objstore.Packer) makes a folder packed: its objects, the keys
// PREFIX+name with no '/' in name, live in an append-only log instead,
// and a write of any number of them is made durable by one fdatasync of
// a file that already exists. kv packs its WAL folder. Deeper keys stay
// files.
//
// Layout: FOLDER/\log/ marks the folder as packed, for good, and holds
// segment files FOLDER/\log/<10-digit number> and a lock file. A segment
// is written whole before it gets its number: header (salt, where the
// previous segment's records end), then zeros to its size (64 KiB for a
// handle's first, doubling to 8 MiB; a batch larger than that gets a
// segment of its size), fsynced, then named with renameat2(NOREPLACE) and
// the \log folder fsynced. Once the current segment is half full the next
// one is made in the background, so a rotation writes no zeros. Records follow the header at 8-aligned
// offsets: put (key, data, its ETag, ModTime) or delete (key). segment.go
// has the bytes.
//
// Why one fdatasync suffices: an append overwrites zeros already on disk,
// so neither the file's size nor its block map changes, and fdatasync has
// only data to flush (on ext4 and xfs one cache flush, no journal
// commit). That is why segments are filled with real zeros and not
// fallocated: fallocate leaves extents marked unwritten, and the first
// write into one converts it, a metadata change fdatasync must then
// journal. On a file system that moves blocks on write (btrfs, zfs)
// fdatasync still makes the data durable, with more work; on tmpfs it
// returns at once and nothing is durable anyway. Correctness never rests
// on the single flush, only speed does.
//
// Guarantees, as for files, for every handle in any process on the
// machine:
//   - Create-only and If-Match are decided, and the record written, under
//     an exclusive flock of FOLDER/\log/lock (and a mutex within the
//     process), after catching up with the log: the decision sees every
//     write that returned before, in any process. Of racing creators
//     exactly one wins.
//   - A write returns after its record's fdatasync. Writes that arrive
//     while an append is in progress share the next one (group commit);
//     the first of them makes it on its own goroutine.
//   - A record is valid only when every field checks, including a check
//     (the first 128 bits of SHA-256 over the segment's random salt, the
//     record's offset, its header and key) and its ETag over its data. A
//     write torn by a crash fails them and is never an object; bytes that
//     merely look like a record (inside an object's data, which users
//     control, or copied from another place) cannot pass without the salt.
//   - Only the handle that made a segment appends to it. So after any
//     crash the next writer makes a new segment, whose header declares
//     where the valid records of the previous one end, and no byte past
//     that point is ever read: not the remains of a torn write, not a
//     record of a dead writer whose flush never finished. After a power
//     failure an earlier record of an unacknowledged write may be lost
//     (its pages read back as the segment's zeros) and a later one
//     survive; the log ends at the zeros, so the later one stays out. If
//     the lost part left bytes that are no record instead (a page torn
//     inside a record), the sealing writer reads past them as past damage
//     and a later record of that write may count: its outcome was unknown
//     anyway, and kv, with one WAL PUT in flight, cannot get a gap from
//     it. A torn last record was
//     never acknowledged, so losing it breaks no promise. TestKill9Packed
//     kills a writer of such a log 200 times and checks every
//     acknowledged object after each kill.
//   - Damage (bit rot) inside a segment loses the records it hits and no
//     others: the scan resynchronizes on the next valid record at an
//     8-aligned offset and logs the damage. kv then sees the lost WAL
//     objects as a gap and reports it. A damaged segment header loses
//     that segment's records. (Damage that zeroes a whole record header
//     at the end of the newest segment looks like its clean end.)
//   - Other handles read new records without the writer's help: a Get or
//     List first catches up from the end it knows (a pread of a record
//     header, an fstatat for a next segment and an fstat of the last,
//     when nothing changed).
//     A reader that meets bytes that are no record at the end of the log
//     (a write in progress) waits on a shared flock for it and looks again;
//     if they are still no record (torn or damaged), it reads on past them
//     exactly as the next writer will before sealing the segment, so every
//     handle agrees on what the log holds.
//     Within a process, no reader sees a record before its fdatasync; in
//     another process one may, as with a file linked but not yet flushed.
//   - A handle notices when others retired its segments while it was
//     idle (its last one deleted, no next one): it reads the \log folder
//     again, so it never decides a create-only write on a stale index or
//     appends to a deleted segment. One that builds its index while a
//     writer retires segments drops the ones deleted under it.
//   - Delete appends a delete record. A segment that holds no current
//     object is deleted (oldest first, each deletion flushed); one whose
//     current objects are at most an eighth of it (kv's fences, kept
//     forever) has them appended again, unchanged, first. Disk use stays
//     within about eight times what is current, plus two segments.
//   - Objects written before the folder was packed stay files: they read,
//     list and delete as before, and block create-only Puts of their key.
//     A Put that replaces one writes a record, then removes the file;
//     while both exist the record is the object.
//
// Cost of a packed write: flock, a catch-up (an fstatat and an fstat), one pwrite
// and one fdatasync of the segment for the whole group, flock again. A
// Get of a packed object: the catch-up and a pread of its data; Head and
// List need no read of data. Each handle keeps an index of its packed
// folders' current objects in memory (about 100 bytes plus the key each),
// built on first use by reading every segment.
//
// What it does not do: keys "a" and "a/b" cannot both exist as files (a
// name is a file or a folder); such a Put fails with ErrKeyConflict (in a
// packed folder only deeper keys are files, so "a" packed and "a/b" a
// file can). Locks are flock(2) locks, so the folder must not be shared
// over NFS or between machines. Files edited in place by hand keep a
// stale cached ETag. A build of tqw from before packed folders does not
// see packed objects (kv marks its manifest so such builds refuse the
// store). An fdatasync that fails leaves the folder unwritable for that
// handle (reopen the store), since what the kernel kept is then unknown.
//
// What it does not do: keys "a" and "a/b" cannot both exist (a name is a
// file or a folder); such a Put fails with ErrKeyConflict. Locks are
// flock(2) locks, so the folder must not be shared over NFS or between
// machines. Files edited in place by hand keep a stale cached ETag.
//
// OpenReadOnly opens a folder for reading only (a ReadOnly): it creates
// nothing, sweeps nothing and holds no lock file, so it works on a
// folder the process may only read and never changes a store it
// inspects; its Put and Delete fail with ErrReadOnly. It reads packed
// folders too (opening their lock file read-only, for the shared flock a
// reader takes while an append is in progress). Its reads cost what
// Store's do, and it keeps folders and segments open until Close;
// opening costs one stat.
package file
