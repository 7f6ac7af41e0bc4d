package file

import (
	"container/list"
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// maxOpenDirs bounds the folder handles a Store keeps open.
const maxOpenDirs = 256

// dirCache keeps folders known to exist open, so a Put creates its temp
// file, links it and fsyncs the folder through one descriptor, without
// mkdir, stat or open calls on the path. Every operation on a cached folder
// goes through its descriptor: if another process removed the folder (a
// Delete of its last object), the descriptor names a deleted folder, in
// which the kernel refuses to create names, so the Put drops the entry,
// creates the folder again and retries. A Put therefore never links into
// one folder and fsyncs another.
type dirCache struct {
	mu  sync.Mutex
	m   map[string]*list.Element // folder path -> element of lru holding *dirHandle
	lru list.List                // front = most recently used
}

// dirHandle is one open folder. It is closed once it left the cache and
// its last user released it.
type dirHandle struct {
	path    string
	f       *os.File
	refs    int
	dropped bool
}

// get returns the open folder at path, opening it when not cached; the
// caller releases it. A missing folder is fs.ErrNotExist.
func (c *dirCache) get(path string) (*dirHandle, error) {
	c.mu.Lock()
	if e, ok := c.m[path]; ok {
		c.lru.MoveToFront(e)
		h := e.Value.(*dirHandle)
		h.refs++
		c.mu.Unlock()
		return h, nil
	}
	c.mu.Unlock()
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*list.Element{}
	}
	if e, ok := c.m[path]; ok { // opened concurrently: keep the first
		f.Close()
		h := e.Value.(*dirHandle)
		h.refs++
		return h, nil
	}
	h := &dirHandle{path: path, f: f, refs: 1}
	c.m[path] = c.lru.PushFront(h)
	for c.lru.Len() > maxOpenDirs {
		c.dropLocked(c.lru.Back().Value.(*dirHandle))
	}
	return h, nil
}

// release ends one use of h.
func (c *dirCache) release(h *dirHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.refs--; h.refs == 0 && h.dropped {
		h.f.Close()
	}
}

// forget drops h from the cache (its folder was removed); it is closed
// once unused.
func (c *dirCache) forget(h *dirHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(h)
}

// forgetPath drops the entry of path, if any.
func (c *dirCache) forgetPath(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[path]; ok {
		c.dropLocked(e.Value.(*dirHandle))
	}
}

func (c *dirCache) dropLocked(h *dirHandle) {
	if h.dropped {
		return
	}
	h.dropped = true
	if e, ok := c.m[h.path]; ok && e.Value.(*dirHandle) == h {
		c.lru.Remove(e)
		delete(c.m, h.path)
	}
	if h.refs == 0 {
		h.f.Close()
	}
}

// close drops every cached folder.
func (c *dirCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.dropLocked(c.lru.Back().Value.(*dirHandle))
	}
}

// do runs fn with the folder's descriptor.
func (h *dirHandle) do(fn func(dfd int) error) error { return withFd(h.f, fn) }

// removed reports whether h's folder was removed from the tree.
func (h *dirHandle) removed() bool {
	var st unix.Stat_t
	err := h.do(func(dfd int) error { return unix.Fstat(dfd, &st) })
	return err == nil && st.Nlink == 0
}

// withFd runs fn with the descriptor of f, which stays valid while fn
// runs even if another goroutine closes f meanwhile.
func withFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }) != nil {
		return os.ErrClosed // the only failure of Control on a file
	}
	return ferr
}

// stale reports an error that means a folder was removed under the
// operation: ENOENT on creating a name in it or on reaching it.
func stale(err error) bool { return errors.Is(err, unix.ENOENT) }
