package file

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// DefaultListLimit is the page size List uses when the caller gives none.
const DefaultListLimit = 1000

// ErrKeyConflict reports a key that cannot be stored because a folder or a
// file is in the way: on a file system "a" and "a/b" cannot both exist.
var ErrKeyConflict = errors.New("file: key conflicts with an existing object or folder")

// reserved marks names the store makes for itself. Keys never contain a
// backslash (objstore.ValidateKey), so no such name is ever an object.
const reserved = `\`

const (
	tmpPrefix  = reserved + "tmp."  // \tmp.<pid>.<process id>.<random>
	lockDir    = reserved + "locks" // striped lock files for If-Match, Put, Delete
	lockStripe = 64
	etagXattr  = "user.tqw.etag"
	// staleTempAge is the age after which any temp file is garbage, even one
	// whose writer cannot be proven dead.
	staleTempAge = time.Hour
)

// procID distinguishes this process from an earlier one with the same
// pid in temp file names; tmpSeq numbers the temp files of this process.
// Both are per process, not per Store: Open sweeps temp files of other
// processes only, never those of another Store of this process.
var (
	procOnce sync.Once
	procID   string
	procErr  error
	tmpSeq   atomic.Uint64
)

// Store keeps objects as files under a root folder. It is safe for
// concurrent use, also by several processes on the same root.
type Store struct {
	root    string
	tmpfile bool // the file system takes O_TMPFILE and linkat through /proc
	dirs    dirCache
	pmu     sync.Mutex
	packs   map[string]*packed // packed folders by key prefix, once seen
	segMin  int64              // first segment size of a packed folder
	segMax  int64
	// readOnly: opened by OpenReadOnly, so nothing may be created, not
	// even a packed folder's lock file.
	readOnly bool
	stripes  [lockStripe]chan struct{}
	locks    [lockStripe]*os.File
	log      *slog.Logger
}

var _ objstore.Store = (*Store)(nil)

// Open returns the store rooted at dir, creating the folder (0700) if it is
// missing, and removes temp files left behind by processes that died
// mid-write. Call Close to release the lock files.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("file: empty folder name: give the folder that holds the store, e.g. .tqw")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: store folder %q: %w", dir, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("file: create store folder %q: %w", root, err)
	}
	if err := os.MkdirAll(filepath.Join(root, lockDir), 0o700); err != nil {
		return nil, fmt.Errorf("file: create lock folder in %q: %w", root, err)
	}
	procOnce.Do(func() {
		var rnd [6]byte
		if _, procErr = rand.Read(rnd[:]); procErr == nil {
			procID = hex.EncodeToString(rnd[:])
		}
	})
	if procErr != nil {
		return nil, fmt.Errorf("file: random process id: %w", procErr)
	}
	s := &Store{root: root, log: slog.Default().With("store", "file://"+root), segMin: segMin, segMax: segMax}
	for i := range s.stripes {
		s.stripes[i] = make(chan struct{}, 1)
		f, err := os.OpenFile(filepath.Join(root, lockDir, strconv.Itoa(i)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("file: open lock file in %q: %w", root, err)
		}
		s.locks[i] = f
	}
	if err := s.sweep(); err != nil {
		s.Close()
		return nil, err
	}
	s.tmpfile = s.probeTmpfile()
	return s, nil
}

// probeTmpfile reports whether a nameless temp file can be created in the
// store's folders and linked to a name: O_TMPFILE needs Linux 3.11 and a
// file system that implements it (ext4, xfs, btrfs, tmpfs do), and the
// link goes through /proc/self/fd. Where it fails, create-only Puts use a
// named temp file.
func (s *Store) probeTmpfile() bool {
	dir := filepath.Join(s.root, lockDir)
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		s.log.Debug("O_TMPFILE unsupported; create-only puts use named temp files", "err", err)
		return false
	}
	defer unix.Close(fd)
	probe := filepath.Join(dir, "probe."+procID)
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, probe, unix.AT_SYMLINK_FOLLOW); err != nil {
		s.log.Debug("linkat of an O_TMPFILE file failed; create-only puts use named temp files", "err", err)
		return false
	}
	return unix.Unlink(probe) == nil
}

// Close releases the lock files. The Store must not be used afterwards.
func (s *Store) Close() error {
	s.pmu.Lock()
	packs := s.packs
	s.packs = nil
	s.pmu.Unlock()
	for _, p := range packs {
		p.shutdown()
	}
	s.dirs.close()
	var errs []error
	for i, f := range s.locks {
		if f != nil {
			errs = append(errs, f.Close())
			s.locks[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Root returns the absolute folder the store lives in.
func (s *Store) Root() string { return s.root }

func (s *Store) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

// lock takes the stripe of key, first within the process (a channel, so
// ctx is honored) and then across processes (flock on the stripe's file).
func (s *Store) lock(ctx context.Context, key string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	i := h.Sum32() % lockStripe
	select {
	case s.stripes[i] <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	fd := int(s.locks[i].Fd())
	for {
		err := unix.Flock(fd, unix.LOCK_EX)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			<-s.stripes[i]
			return nil, fmt.Errorf("file: lock: %w", err)
		}
	}
	return func() {
		_ = unix.Flock(fd, unix.LOCK_UN)
		<-s.stripes[i]
	}, nil
}

func etagOf(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// readETag returns the ETag of the open object file: the cached xattr set
// by Put, or, when absent (file system without user xattrs, file copied in
// by hand), a hash of the content.
func readETag(f *os.File) (string, error) {
	var buf [64]byte
	n, err := unix.Fgetxattr(int(f.Fd()), etagXattr, buf[:])
	if err == nil && n == 34 {
		return string(buf[:n]), nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", err
	}
	return `"` + hex.EncodeToString(h.Sum(nil)[:16]) + `"`, nil
}

func ctxErr(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	return nil
}

// open opens the object file of key for reading, mapping a missing file or
// a folder to ErrNotExist.
func (s *Store) open(op, key string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(s.path(key))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil, fmt.Errorf("file: %s %q: %w", op, key, objstore.ErrNotExist)
		}
		return nil, nil, fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("file: %s %q: %w", op, key, objstore.ErrNotExist)
	}
	return f, fi, nil
}

// Get implements objstore.Store. Cost: openat through the open folder,
// fstat, read, fgetxattr, close; in a packed folder, the catch-up of its index (a pread and an
// fstatat when nothing changed) and a pread of the data.
func (s *Store) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	if err := ctxErr(ctx, "get", key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return s.read(key, true)
}

// read implements Get (withData) and Head.
func (s *Store) read(key string, withData bool) ([]byte, objstore.ObjectInfo, error) {
	op := "get"
	if !withData {
		op = "head"
	}
	p, d, err := s.route(key)
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	if p != nil {
		data, info, ok, err := p.get(key, withData)
		if ok || err != nil {
			return data, info, err
		}
		return s.getPlain(key, withData) // a file written before the folder was packed
	}
	if d == nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, objstore.ErrNotExist)
	}
	defer s.dirs.release(d)
	var fd int
	err = d.do(func(dfd int) error {
		var err error
		fd, err = unix.Openat(dfd, filepath.Base(s.path(key)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if stale(err) && d.removed() {
		return s.getPlain(key, withData) // the folder was removed (and maybe made again) meanwhile
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, objstore.ErrNotExist)
	}
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	return readObject(os.NewFile(uintptr(fd), s.path(key)), op, key, withData)
}

// route returns the packed folder of key, or else its open folder (nil
// when it does not exist; the caller releases it). Cost for a folder not
// known packed: an fstatat of its \log through the open folder, and an
// fstat of the folder when that is missing (to tell a folder another
// process removed).
func (s *Store) route(key string) (*packed, *dirHandle, error) {
	folder := folderKey(key)
	s.pmu.Lock()
	p := s.packs[folder]
	s.pmu.Unlock()
	if p != nil {
		return p, nil, nil
	}
	dir := filepath.Dir(s.path(key))
	for attempt := 0; ; attempt++ {
		d, err := s.dirs.get(dir)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		var st unix.Stat_t
		err = d.do(func(dfd int) error { return unix.Fstatat(dfd, logDirName, &st, unix.AT_SYMLINK_NOFOLLOW) })
		switch {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
			s.dirs.release(d)
			p, err := s.packedFor(folder)
			return p, nil, err
		case err == nil, errors.Is(err, unix.ENOENT) && !d.removed():
			return nil, d, nil
		case errors.Is(err, unix.ENOENT):
			s.dirs.forget(d) // removed by a Delete: look at the live folder
			s.dirs.release(d)
			if attempt == 2 {
				// Removed again and again by racing Deletes: a folder they
				// can remove is empty, so holds no \log, and was not packed
				// (callers create it again as they need it).
				return nil, nil, nil
			}
		default:
			s.dirs.release(d)
			return nil, nil, err
		}
	}
}

// getPlain reads the object file of key through its path.
func (s *Store) getPlain(key string, withData bool) ([]byte, objstore.ObjectInfo, error) {
	op := "get"
	if !withData {
		op = "head"
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, objstore.ErrNotExist)
	}
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	return readObject(f, op, key, withData)
}

// readObject reads the open object file f of key and closes it. A folder
// is no object.
func readObject(f *os.File, op, key string, withData bool) ([]byte, objstore.ObjectInfo, error) {
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: %w", op, key, objstore.ErrNotExist)
	}
	var data []byte
	if withData {
		data = make([]byte, fi.Size())
		if _, err := io.ReadFull(f, data); err != nil {
			return nil, objstore.ObjectInfo{}, fmt.Errorf("file: get %q: read: %w", key, err)
		}
	}
	etag, err := readETag(f)
	if err != nil {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("file: %s %q: etag: %w", op, key, err)
	}
	return data, objstore.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag, ModTime: fi.ModTime()}, nil
}

// Head implements objstore.Store. Cost: Get's without the read; in a
// packed folder, the catch-up of its index only.
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := ctxErr(ctx, "head", key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	_, info, err := s.read(key, false)
	return info, err
}

// mkdirs creates the folders of key below the root (0700), fsyncing each
// parent whose entries changed so a new folder survives a crash.
func (s *Store) mkdirs(key string) error {
	segs := strings.Split(key, "/")
	dir := s.root
	for _, seg := range segs[:len(segs)-1] {
		next := filepath.Join(dir, seg)
		err := os.Mkdir(next, 0o700)
		switch {
		case err == nil:
			if err := syncDir(dir); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			fi, err := os.Lstat(next)
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				return fmt.Errorf("%w: object %q is in the way", ErrKeyConflict, strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(next, s.root)), "/"))
			}
		default:
			return err
		}
		dir = next
	}
	return nil
}

// syncParent fsyncs the folder an entry was changed in. If a concurrent
// Delete removed that folder meanwhile, it fsyncs the nearest folder that
// still exists, which records the removal.
func (s *Store) syncParent(dir string) error {
	for {
		err := syncDir(dir)
		if !errors.Is(err, fs.ErrNotExist) || dir == s.root || !strings.HasPrefix(dir, s.root) {
			return err
		}
		dir = filepath.Dir(dir)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// tmpName returns a fresh temp file name: unique within the process by a
// counter, across processes by pid and process id. The backslash keeps it
// from ever being taken for an object.
func (s *Store) tmpName() string {
	return tmpPrefix + strconv.Itoa(os.Getpid()) + "." + procID + "." + strconv.FormatUint(tmpSeq.Add(1), 36)
}

// writeFd writes data to the new file fd, caches its ETag, fsyncs it and
// returns its ModTime.
func writeFd(fd int, data []byte, etag string) (time.Time, error) {
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		rest = rest[n:]
	}
	// The xattr only caches the content hash; readers recompute it when
	// the file system does not keep user xattrs.
	if err := unix.Fsetxattr(fd, etagXattr, []byte(etag), 0); err != nil &&
		!errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EOPNOTSUPP) {
		return time.Time{}, err
	}
	if err := unix.Fsync(fd); err != nil {
		return time.Time{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return time.Time{}, err
	}
	return time.Unix(st.Mtim.Unix()), nil
}

// Put implements objstore.Store. Cost of a create-only Put: a nameless
// temp file (O_TMPFILE) in the object's folder is written, its ETag
// cached in an xattr, fsynced and linked to the key's name (linkat fails
// if the name exists), then the folder is fsynced: openat, write,
// fsetxattr, fsync, fstat, linkat, close, fsync. Where the file system
// refuses O_TMPFILE, a named temp file is created, linked and unlinked.
// Other Puts write a named temp file the same way and, under the key's
// lock (after open+fgetxattr+close of the current object for If-Match),
// rename it over the key, then fsync the folder. Folders are kept open
// (see dirCache); a folder not yet open costs an open, one that does not
// exist mkdir+fsync of its parent per level.
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := opts.Validate(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := ctxErr(ctx, "put", key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	etag := etagOf(data)
	p, d, err := s.route(key)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("file: put %q: %w", key, err)
	}
	if d != nil {
		s.dirs.release(d) // create and replace take it again, cached
	}
	if p != nil {
		return p.put(ctx, key, data, etag, opts)
	}
	// A concurrent Delete may remove an emptied folder at any point before
	// the link or rename; trying again recreates it.
	for attempt := 0; ; attempt++ {
		var info objstore.ObjectInfo
		var retry bool
		var err error
		if opts.IfNoneMatch {
			// After a folder vanished, a named temp file: a nameless one
			// leaves the folder empty, so racing Deletes may remove it
			// during every write and fsync; a name keeps it.
			info, retry, err = s.create(key, data, etag, attempt == 0)
		} else {
			info, retry, err = s.replace(ctx, key, data, etag, opts.IfMatch)
		}
		if !retry || attempt == 20 {
			return info, err
		}
	}
}

// folder returns the open folder of key, creating it when missing. The
// caller releases it.
func (s *Store) folder(key string) (*dirHandle, error) {
	dir := filepath.Dir(s.path(key))
	if d, err := s.dirs.get(dir); err == nil {
		return d, nil
	}
	if err := s.mkdirs(key); err != nil {
		return nil, err
	}
	return s.dirs.get(dir)
}

// openTemp creates a temp file in the folder d: nameless (O_TMPFILE) when
// nameless is set and the file system supports it, else named (returned
// in name). retry reports a folder that vanished, before anything was
// created.
func (s *Store) openTemp(d *dirHandle, nameless bool) (fd int, name string, retry bool, err error) {
	err = d.do(func(dfd int) error {
		var err error
		if nameless && s.tmpfile {
			fd, err = unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			var st unix.Stat_t
			if err == unix.EPERM && unix.Fstat(dfd, &st) == nil && st.Nlink == 0 {
				err = unix.ENOENT // ext4 refuses O_TMPFILE in a removed folder with EPERM
			}
			return err
		}
		name = s.tmpName()
		fd, err = unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		return err
	})
	if stale(err) {
		s.dirs.forget(d)
		return -1, "", true, err
	}
	return fd, name, false, err
}

// create is a create-only Put. retry reports that the folder vanished
// before the link, so nothing was written.
func (s *Store) create(key string, data []byte, etag string, nameless bool) (objstore.ObjectInfo, bool, error) {
	d, err := s.folder(key)
	if err != nil {
		return objstore.ObjectInfo{}, stale(err), putErr(key, "", err)
	}
	defer s.dirs.release(d)
	fd, tmp, retry, err := s.openTemp(d, nameless)
	if err != nil {
		return objstore.ObjectInfo{}, retry, putErr(key, "create temp file", err)
	}
	defer unix.Close(fd)
	unlinkTmp := func() {
		if tmp != "" {
			_ = d.do(func(dfd int) error { return unix.Unlinkat(dfd, tmp, 0) })
			tmp = ""
		}
	}
	defer unlinkTmp()
	mtime, err := writeFd(fd, data, etag)
	if err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "write temp file", err)
	}
	name := filepath.Base(s.path(key))
	link := func(dfd int) error {
		if tmp == "" {
			return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dfd, name, unix.AT_SYMLINK_FOLLOW)
		}
		return unix.Linkat(dfd, tmp, dfd, name, 0)
	}
	err = d.do(link)
	if errors.Is(err, unix.EEXIST) {
		// An empty folder of that name, left by a Delete whose process
		// died before removing it, is not an object: remove it and retry.
		cleared, cerr := clearEmptyDir(d, name)
		switch {
		case cerr != nil:
			return objstore.ObjectInfo{}, false, putErr(key, "remove empty folder", cerr)
		case cleared:
			err = d.do(link)
		case isDirAt(d, name):
			return objstore.ObjectInfo{}, false, fmt.Errorf("file: put %q: %w: a folder of that name holds other objects", key, ErrKeyConflict)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		return objstore.ObjectInfo{}, false, fmt.Errorf("file: put %q: object exists: %w", key, objstore.ErrPrecondition)
	}
	if stale(err) {
		s.dirs.forget(d)
		return objstore.ObjectInfo{}, true, putErr(key, "link", err)
	}
	if err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "link", err)
	}
	unlinkTmp() // before the folder's fsync, which then records both changes
	if err := d.f.Sync(); err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "sync folder", err)
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(data)), ETag: etag, ModTime: mtime}, false, nil
}

// replace is an unconditional or If-Match Put. retry reports that the
// folder vanished before the rename, so nothing was written.
func (s *Store) replace(ctx context.Context, key string, data []byte, etag, ifMatch string) (objstore.ObjectInfo, bool, error) {
	d, err := s.folder(key)
	if err != nil {
		return objstore.ObjectInfo{}, stale(err), putErr(key, "", err)
	}
	defer s.dirs.release(d)
	fd, tmp, retry, err := s.openTemp(d, false)
	if err != nil {
		return objstore.ObjectInfo{}, retry, putErr(key, "create temp file", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = d.do(func(dfd int) error { return unix.Unlinkat(dfd, tmp, 0) })
		}
	}()
	mtime, err := writeFd(fd, data, etag)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "write temp file", err)
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "", err)
	}
	defer unlock()
	if ifMatch != "" {
		f, _, err := s.open("put", key)
		if errors.Is(err, objstore.ErrNotExist) {
			return objstore.ObjectInfo{}, false, fmt.Errorf("file: put %q: if-match on a missing object: %w", key, objstore.ErrPrecondition)
		}
		if err != nil {
			return objstore.ObjectInfo{}, false, err
		}
		cur, err := readETag(f)
		f.Close()
		if err != nil {
			return objstore.ObjectInfo{}, false, putErr(key, "etag", err)
		}
		if cur != ifMatch {
			return objstore.ObjectInfo{}, false, fmt.Errorf("file: put %q: etag is %s, not %s: %w", key, cur, ifMatch, objstore.ErrPrecondition)
		}
	}
	name := filepath.Base(s.path(key))
	rename := func(dfd int) error { return unix.Renameat(dfd, tmp, dfd, name) }
	err = d.do(rename)
	if errors.Is(err, unix.EISDIR) {
		// A folder is in the way; an empty one is a leftover (see create).
		cleared, cerr := clearEmptyDir(d, name)
		switch {
		case cerr != nil:
			return objstore.ObjectInfo{}, false, putErr(key, "remove empty folder", cerr)
		case !cleared:
			return objstore.ObjectInfo{}, false, fmt.Errorf("file: put %q: %w: a folder of that name holds other objects", key, ErrKeyConflict)
		}
		err = d.do(rename)
	}
	if err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "rename", err)
	}
	renamed = true
	if err := d.f.Sync(); err != nil {
		return objstore.ObjectInfo{}, false, putErr(key, "sync folder", err)
	}
	return objstore.ObjectInfo{Key: key, Size: int64(len(data)), ETag: etag, ModTime: mtime}, false, nil
}

func putErr(key, what string, err error) error {
	if what == "" {
		return fmt.Errorf("file: put %q: %w", key, err)
	}
	return fmt.Errorf("file: put %q: %s: %w", key, what, err)
}

// clearEmptyDir removes the folder name in d if it is empty, reporting
// whether it did. It is a no-op (false, nil) when name is not a folder
// or holds entries.
func clearEmptyDir(d *dirHandle, name string) (bool, error) {
	err := d.do(func(dfd int) error { return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR) })
	switch {
	case err == nil:
		return true, d.f.Sync()
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENOENT):
		return false, nil
	default:
		return false, err
	}
}

func isDirAt(d *dirHandle, name string) bool {
	var st unix.Stat_t
	err := d.do(func(dfd int) error { return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// Delete implements objstore.Store. Cost: unlinkat and fsync of the
// (open) folder under the key's lock, plus rmdir and a parent fsync for
// each folder the delete emptied.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if err := ctxErr(ctx, "delete", key); err != nil {
		return err
	}
	p, fd, err := s.route(key)
	if err != nil {
		return fmt.Errorf("file: delete %q: %w", key, err)
	}
	if fd != nil {
		s.dirs.release(fd)
	}
	if p != nil {
		return p.delete(ctx, key)
	}
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return fmt.Errorf("file: delete %q: %w", key, err)
	}
	defer unlock()
	dir, name := filepath.Dir(s.path(key)), filepath.Base(s.path(key))
	var d *dirHandle
	for attempt := 0; ; attempt++ {
		d, err = s.dirs.get(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
				return nil // no folder, no object
			}
			return fmt.Errorf("file: delete %q: %w", key, err)
		}
		err = d.do(func(dfd int) error { return unix.Unlinkat(dfd, name, 0) })
		// ENOENT through a cached folder that another process removed
		// (and maybe made again) says nothing: ask the live folder.
		if stale(err) && attempt == 0 && d.removed() {
			s.dirs.forget(d)
			s.dirs.release(d)
			continue
		}
		break
	}
	defer s.dirs.release(d)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EPERM) && isDirAt(d, name):
		return nil // no object; a folder is not an object
	case err != nil:
		return fmt.Errorf("file: delete %q: %w", key, err)
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("file: delete %q: sync folder: %w", key, err)
	}
	// Remove folders the delete emptied, so the name can hold an object
	// again; rmdir fails harmlessly on a folder that is not empty.
	removed := false
	for dir != s.root && strings.HasPrefix(dir, s.root) {
		if unix.Rmdir(dir) != nil {
			break
		}
		s.dirs.forgetPath(dir)
		removed = true
		dir = filepath.Dir(dir)
	}
	if removed {
		if err := s.syncParent(dir); err != nil {
			return fmt.Errorf("file: delete %q: sync folder: %w", key, err)
		}
	}
	return nil
}

// entry is one name in a folder, ordered as its keys sort.
type entry struct {
	name  string
	dir   bool
	order string // name, or name+"/" for a folder: all its keys start so
}

// readDir returns the folder's objects and sub-folders in key byte order,
// skipping reserved names, and whether the folder is packed.
func readDir(dir string) (out []entry, packed bool, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	out = make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		if name == logDirName && de.IsDir() {
			packed = true
		}
		if strings.Contains(name, reserved) {
			continue
		}
		t := de.Type()
		switch {
		case t.IsDir():
			out = append(out, entry{name: name, dir: true, order: name + "/"})
		case t.IsRegular():
			out = append(out, entry{name: name, order: name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].order < out[j].order })
	return out, packed, nil
}

// List implements objstore.Store. Keys sort by bytes, so a folder "a" is
// visited where "a/" sorts among its siblings ("a-b" < "a.b" < "a/..." <
// "a0"). Folders that cannot hold a key of the page are not read.
// Cost: one readdir per folder visited and one open+fstat+fgetxattr per
// object returned.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, "list", prefix); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	l := lister{s: s, ctx: ctx, prefix: prefix, after: startAfter, limit: limit}
	if err := l.walk(s.root, ""); err != nil && !errors.Is(err, errPageFull) {
		return nil, fmt.Errorf("file: list %q after %q: %w", prefix, startAfter, err)
	}
	return l.out, nil
}

var errPageFull = errors.New("page full")

type lister struct {
	s             *Store
	ctx           context.Context
	prefix, after string
	limit         int
	out           []objstore.ObjectInfo
}

// walk visits folder dir, whose keys all start with base ("" or "x/y/").
func (l *lister) walk(dir, base string) error {
	if err := l.ctx.Err(); err != nil {
		return err
	}
	entries, isPacked, err := readDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed by a concurrent Delete
		}
		return err
	}
	// A packed folder's objects in its log merge with its files (written
	// before it was packed) in key order; for a key in both, the log's.
	var logged []objstore.ObjectInfo
	if isPacked {
		p, err := l.s.packedFor(base)
		if err != nil {
			return err
		}
		if p != nil {
			if logged, err = p.list(l.prefix, l.after, l.limit-len(l.out)); err != nil {
				return err
			}
		}
	}
	emit := func(info objstore.ObjectInfo) error {
		l.out = append(l.out, info)
		if len(l.out) == l.limit {
			return errPageFull
		}
		return nil
	}
	emitLogged := func(before string) error {
		for len(logged) > 0 && logged[0].Key < before {
			if err := emit(logged[0]); err != nil {
				return err
			}
			logged = logged[1:]
		}
		return nil
	}
	for _, e := range entries {
		k := base + e.order
		if err := emitLogged(k); err != nil {
			return err
		}
		if e.dir {
			// Every key below starts with k. Skip the folder unless it can
			// hold a key with the prefix that sorts after startAfter.
			if !strings.HasPrefix(k, l.prefix) && !strings.HasPrefix(l.prefix, k) {
				continue
			}
			if l.after >= k && !strings.HasPrefix(l.after, k) {
				continue
			}
			if err := l.walk(filepath.Join(dir, e.name), k); err != nil {
				return err
			}
			continue
		}
		if k <= l.after || !strings.HasPrefix(k, l.prefix) {
			continue
		}
		if len(logged) > 0 && logged[0].Key == k {
			continue // the log's version, emitted next
		}
		_, info, err := l.s.getPlain(k, false)
		if errors.Is(err, objstore.ErrNotExist) {
			continue // deleted since readdir
		}
		if err != nil {
			return err
		}
		if err := emit(info); err != nil {
			return err
		}
	}
	for _, info := range logged {
		if err := emit(info); err != nil {
			return err
		}
	}
	return nil
}

// sweep removes temp files of writers that are gone: a dead pid, this pid
// but an earlier process, or older than staleTempAge. It runs on Open.
func (s *Store) sweep() error {
	now := time.Now()
	me := strconv.Itoa(os.Getpid())
	return filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("file: sweep temp files in %q: %w", s.root, err)
		}
		name := d.Name()
		if d.IsDir() {
			if name == lockDir {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(name, tmpPrefix) {
			return nil
		}
		parts := strings.Split(strings.TrimPrefix(name, tmpPrefix), ".")
		stale := len(parts) != 3
		if !stale {
			if parts[0] == me {
				stale = parts[1] != procID
			} else if pid, err := strconv.Atoi(parts[0]); err != nil || pid <= 0 || unix.Kill(pid, 0) == unix.ESRCH {
				stale = true
			}
		}
		if !stale {
			if fi, err := d.Info(); err == nil && now.Sub(fi.ModTime()) > staleTempAge {
				stale = true
			}
		}
		if stale {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("file: remove stale temp file %q: %w", p, err)
			}
			s.log.Debug("removed stale temp file", "path", p)
		}
		return nil
	})
}
