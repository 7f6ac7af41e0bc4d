package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/fsnotify/fsnotify"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// bellFormat marks a doorbell object as the inbox's.
const bellFormat = "inbox-bell"

// folderWatch wakes a waiter as soon as an object is created in one folder
// of a local file store (the inbox's commands or answers), through the
// operating system's change notification (inotify, kqueue). It only
// shortens waits: a notification can be missed (some file systems send
// none, a queue overflows), so every waiter keeps polling as before.
//
// The file store removes a folder its last object left, which ends a
// watch on it, so the folder's parent is watched too and the folder is
// watched again whenever it is created.
type folderWatch struct {
	w      *fsnotify.Watcher
	dir    string
	wake   chan struct{}
	done   chan struct{}
	log    *slog.Logger
	isName func(string) bool
}

// watchFolder watches the folder of prefix in store when store is (or
// wraps) a local file store, waking for objects whose name isName
// accepts. It returns nil, and no error, for other stores.
func watchFolder(store objstore.Store, prefix string, isName func(string) bool, log *slog.Logger) (*folderWatch, error) {
	root, ok := localRoot(store)
	if !ok {
		return nil, nil
	}
	dir := filepath.Join(root, filepath.FromSlash(prefix))
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("remote: watch %s for changes: %w", dir, err)
	}
	if err := w.Add(filepath.Dir(dir)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("remote: watch %s for changes: %w", filepath.Dir(dir), err)
	}
	fw := &folderWatch{w: w, dir: dir, wake: make(chan struct{}, 1), done: make(chan struct{}), log: log, isName: isName}
	if err := fw.addDir(); err != nil {
		_ = w.Close()
		return nil, err
	}
	go fw.loop()
	return fw, nil
}

// addDir watches the folder itself, when it exists.
func (fw *folderWatch) addDir() error {
	if err := fw.w.Add(fw.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remote: watch %s for changes: %w", fw.dir, err)
	}
	return nil
}

func (fw *folderWatch) loop() {
	defer close(fw.done)
	for {
		select {
		case ev, ok := <-fw.w.Events:
			if !ok {
				return
			}
			if !ev.Has(fsnotify.Create) {
				continue
			}
			switch {
			case ev.Name == fw.dir:
				// The folder was (re)created: objects may be in it
				// already, so wake as well as watch it.
				if err := fw.addDir(); err != nil {
					fw.log.Debug("change notification lost; polling", "err", err)
				}
				fw.signal()
			case filepath.Dir(ev.Name) == fw.dir && fw.isName(filepath.Base(ev.Name)):
				fw.signal()
			}
		case err, ok := <-fw.w.Errors:
			if !ok {
				return
			}
			// An overflow may have dropped the very event waited for.
			fw.log.Debug("change notification error; waking to look", "dir", fw.dir, "err", err)
			fw.signal()
		}
	}
}

func (fw *folderWatch) signal() {
	select {
	case fw.wake <- struct{}{}:
	default:
	}
}

// C is signalled (coalesced, capacity one) after an object was created
// in the folder; nil for a nil watch, which never fires.
func (fw *folderWatch) C() <-chan struct{} {
	if fw == nil {
		return nil
	}
	return fw.wake
}

// Close ends the watch. A nil watch is a no-op.
func (fw *folderWatch) Close() {
	if fw == nil {
		return
	}
	_ = fw.w.Close()
	<-fw.done
}

// localRoot finds the local folder of a file store, looking through
// wrappers (counting, faults) that expose Unwrap.
func localRoot(store objstore.Store) (string, bool) {
	for i := 0; store != nil && i < 16; i++ {
		if r, ok := store.(interface{ Root() string }); ok {
			return r.Root(), true
		}
		u, ok := store.(interface{ Unwrap() objstore.Store })
		if !ok {
			return "", false
		}
		store = u.Unwrap()
	}
	return "", false
}

// bellKey is the doorbell of the inbox at prefix: a single object a
// Client overwrites after each command it sends, so that a writer can
// learn of new commands with a HEAD, which costs a twelfth of a LIST on
// S3, instead of listing the inbox.
func bellKey(prefix string) string { return prefix + "-bell" }

// ring overwrites the doorbell with the id of the command just sent. The
// id makes each ring's content, hence its ETag, new.
func ring(ctx context.Context, store objstore.Store, prefix, id string) error {
	b, err := json.Marshal(struct {
		Tqw string `json:"tqw"`
		ID  string `json:"id"`
	}{bellFormat, id})
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, bellKey(prefix), b, objstore.PutOptions{}); err != nil {
		return fmt.Errorf("remote: ring the inbox doorbell %s: %w", bellKey(prefix), err)
	}
	return nil
}

// waitForChange waits up to d for a sign that a command may have
// arrived: a change notification from watch, or, without one, a new
// ETag of the doorbell, read every bellEvery. It returns false when ctx
// ended first. lastBell is the doorbell ETag seen before the last LIST;
// it is updated to the one that ended the wait.
func waitForChange(ctx context.Context, clk clock.Clock, d time.Duration, watch *folderWatch,
	store objstore.Store, bell string, bellEvery time.Duration, lastBell *string, log *slog.Logger) bool {
	if watch != nil || bellEvery <= 0 || bellEvery >= d {
		return waitWake(ctx, clk, d, watch.C())
	}
	deadline := clk.Now().Add(d)
	for {
		left := deadline.Sub(clk.Now())
		if left <= 0 {
			return true
		}
		if clock.Sleep(ctx, clk, min(bellEvery, left)) != nil {
			return false
		}
		info, err := store.Head(ctx, bell)
		switch {
		case errors.Is(err, objstore.ErrNotExist):
			info.ETag = ""
		case err != nil:
			if ctx.Err() != nil {
				return false
			}
			log.Debug("reading the inbox doorbell failed; the next LIST finds the commands", "key", bell, "err", err)
			continue
		}
		if info.ETag != *lastBell {
			*lastBell = info.ETag
			return true
		}
	}
}

// waitWake waits d on clock or until wake fires (a nil wake never does);
// false when ctx ended first.
func waitWake(ctx context.Context, clock clock.Clock, d time.Duration, wake <-chan struct{}) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-wake:
		return true
	case <-ctx.Done():
		return false
	}
}
