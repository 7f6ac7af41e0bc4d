package file_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

const (
	packedChildEnv = "TQW_FILE_PACKED_CHILD" // root folder; set only in the child
	packedKillsEnv = "TQW_FILE_PACKED_KILLS" // kills in TestKill9Packed; default 200
	packedPrefix   = "log/"
	packedSegment  = 64 << 10 // small, so kills land in rotations and retirements too
)

func packedKey(seq int) string { return fmt.Sprintf("%s%020d", packedPrefix, seq) }

// packedChild writes a log into a packed folder until killed, as kv does:
// create-only objects at increasing sequences from two goroutines (so
// appends are shared), a deleter retiring old ones behind a watermark, and
// an If-Match object rewritten in place. It prints "A <seq> <sha256>"
// after each create-only Put returned and "W <seq>" before deleting
// anything below seq.
func packedChild(dir string) error {
	ctx := context.Background()
	s, err := file.Open(dir)
	if err != nil {
		return err
	}
	file.SetSegmentSize(s, packedSegment)
	if err := s.Pack(ctx, packedPrefix); err != nil {
		return err
	}
	next, first := 0, -1
	for after := ""; ; {
		page, err := s.List(ctx, packedPrefix, after, 1000)
		if err != nil {
			return err
		}
		for _, o := range page {
			if n, err := strconv.Atoi(strings.TrimPrefix(o.Key, packedPrefix)); err == nil {
				next = max(next, n+1)
				if first < 0 {
					first = n
				}
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	say("ready")
	var seq atomic.Int64
	seq.Store(int64(next))
	errc := make(chan error, 3)
	for w := range 2 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(next), uint64(w)))
			payload := make([]byte, 600<<10)
			for {
				size := 1 + rng.IntN(1<<rng.IntN(13)) // mostly small, up to 8 KiB
				if rng.IntN(25) == 0 {
					size = 100<<10 + rng.IntN(500<<10) // larger than a segment: a kill may tear its write
				}
				for i := range size {
					payload[i] = byte(rng.Uint32())
				}
				data := record(payload[:size])
				n := int(seq.Add(1) - 1)
				_, err := s.Put(ctx, packedKey(n), data, objstore.CreateOnly())
				if errors.Is(err, objstore.ErrPrecondition) {
					continue // an unacknowledged write of the killed child landed here
				}
				if err != nil {
					errc <- err
					return
				}
				sum := sha256.Sum256(data)
				say("A %d %s", n, hex.EncodeToString(sum[:]))
			}
		}()
	}
	go func() {
		wm := next
		if first >= 0 {
			wm = first // what an earlier child left behind its watermark
		}
		for i := 0; ; i++ {
			if i%4 == 0 {
				// An object rewritten in place, If-Match.
				info, err := s.Head(ctx, packedPrefix+"meta")
				var data [8]byte
				binary.BigEndian.PutUint64(data[:], uint64(i))
				switch {
				case errors.Is(err, objstore.ErrNotExist):
					_, err = s.Put(ctx, packedPrefix+"meta", record(data[:]), objstore.CreateOnly())
				case err == nil:
					_, err = s.Put(ctx, packedPrefix+"meta", record(data[:]), objstore.IfMatch(info.ETag))
				}
				if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
					errc <- err
					return
				}
			}
			top := int(seq.Load()) - 30
			if top <= wm {
				time.Sleep(time.Millisecond)
				continue
			}
			say("W %d", top)
			// Eight at a time, as kv deletes after a checkpoint: their
			// deletes share appends.
			var wg sync.WaitGroup
			for d := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := wm + d; n < top; n += 8 {
						if err := s.Delete(ctx, packedKey(n)); err != nil {
							errc <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			wm = top
		}
	}()
	return <-errc
}

// TestKill9Packed SIGKILLs a child writing a log into a packed folder at
// random moments (inside appends, segment rotations and retirements) and
// checks after each kill, from a fresh handle, that every create-only
// write the child was told succeeded and did not delete is there with its
// bytes, that every object is whole (no torn record is ever an object),
// and that reopening leaves no temp file. A later child goes on writing
// after whatever the kill left.
func TestKill9Packed(t *testing.T) {
	t.Parallel()
	crashtest.Parent(t, packedChildEnv)
	kills := crashtest.Count(t, packedKillsEnv, shortOr(200, 60))
	dir := t.TempDir()
	rng := crashtest.Rand(t, 5)
	acked := map[int]string{}
	wm, torn, inFlight, verified, maxSegs := 0, 0, 0, 0, 0
	start := time.Now()
	for k := range kills {
		c := crashtest.Start(t, crashtest.Command(context.Background(), "^$", packedChildEnv+"="+dir))
		if err := c.WaitReady("ready"); err != nil {
			_ = c.Kill()
			t.Fatalf("kill %d: child did not start: %v", k, err)
		}
		lines := make(chan []string)
		go func() {
			var got []string
			for {
				line, ok := c.Line()
				if !ok {
					lines <- got
					return
				}
				got = append(got, line)
			}
		}()
		time.Sleep(crashtest.Delay(rng, 40*time.Millisecond))
		if err := c.Signal(); err != nil {
			t.Fatal(err)
		}
		for _, line := range <-lines { // printed before the kill: acknowledged
			f := strings.Fields(line)
			n, _ := strconv.Atoi(f[1])
			switch {
			case f[0] == "A" && len(f) == 3:
				acked[n] = f[2]
			case f[0] == "W":
				wm = max(wm, n)
			default:
				t.Fatalf("kill %d: child said %q", k, line)
			}
		}
		if err := c.Reap(); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}

		s, err := file.Open(dir)
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", k, err)
		}
		tt, nseg, err := file.TornTail(s, packedPrefix)
		if err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		if tt {
			torn++
		}
		// What is current is ~30 small objects: retired segments must go
		// even when kills interrupt the deletes and the moves.
		if maxSegs = max(maxSegs, nseg); nseg > 16 {
			t.Fatalf("kill %d: %d segments for ~30 current objects: retired segments are not deleted", k, nseg)
		}
		if left := tempFiles(t, dir); len(left) > 0 {
			t.Fatalf("kill %d: temp files of the dead writer survive reopening: %v", k, left)
		}
		top := -1
		for n := range acked {
			top = max(top, n)
		}
		if _, err := s.Head(bg, packedKey(top+1)); err == nil {
			inFlight++ // a write the child never heard back from is there: the kill hit an append
		}
		for n, sum := range acked {
			if n < wm {
				delete(acked, n)
				continue
			}
			b, _, err := s.Get(bg, packedKey(n))
			if err != nil {
				t.Fatalf("kill %d: acknowledged %s: %v", k, packedKey(n), err)
			}
			if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
				t.Fatalf("kill %d: acknowledged %s holds other bytes", k, packedKey(n))
			}
			verified++
		}
		for after := ""; ; {
			l, err := s.List(bg, packedPrefix, after, 100)
			if err != nil {
				t.Fatalf("kill %d: List: %v", k, err)
			}
			for _, o := range l {
				b, info, err := s.Get(bg, o.Key)
				if err != nil {
					t.Fatalf("kill %d: Get(%q) of a listed object: %v", k, o.Key, err)
				}
				if err := checkRecord(b); err != nil {
					t.Fatalf("kill %d: object %q is not whole: %v", k, o.Key, err)
				}
				if info.ETag != o.ETag || info.Size != o.Size {
					t.Fatalf("kill %d: %q: List says %+v, Get %+v", k, o.Key, o, info)
				}
			}
			if len(l) < 100 {
				break
			}
			after = l[len(l)-1].Key
		}
		s.Close()
	}
	t.Logf("%d kills in %v; %d landed after an append's write and before its acknowledgment, %d tore an append; %d acknowledged writes verified; at most %d segments",
		kills, time.Since(start).Round(time.Millisecond), inFlight, torn, verified, maxSegs)
	if kills >= 50 && inFlight == 0 {
		t.Fatal("no kill landed inside an append; the test did not exercise the crash path")
	}
}
