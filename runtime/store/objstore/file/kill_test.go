package file_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

const (
	killChildEnv = "TQW_FILE_KILL_CHILD" // root folder; set only in the child
	killSeedEnv  = "TQW_FILE_KILL_SEED"
	killCountEnv = "TQW_FILE_KILL_COUNT" // kills in TestKill9; default 200
)

func TestMain(m *testing.M) {
	crashtest.IfChild(packedChildEnv, packedChild)
	crashtest.IfChild(killChildEnv, func(dir string) error {
		seed, _ := strconv.ParseUint(os.Getenv(killSeedEnv), 10, 64)
		return killChild(dir, seed)
	})
	os.Exit(m.Run())
}

// record encodes payload self-checking: 8-byte length, payload, SHA-256.
func record(payload []byte) []byte {
	out := binary.BigEndian.AppendUint64(nil, uint64(len(payload)))
	out = append(out, payload...)
	sum := sha256.Sum256(payload)
	return append(out, sum[:]...)
}

func checkRecord(b []byte) error {
	if len(b) < 8+32 {
		return fmt.Errorf("%d bytes: shorter than a record header", len(b))
	}
	n := binary.BigEndian.Uint64(b)
	if uint64(len(b)) != 8+n+32 {
		return fmt.Errorf("%d bytes, header says payload of %d", len(b), n)
	}
	sum := sha256.Sum256(b[8 : 8+n])
	if string(sum[:]) != string(b[8+n:]) {
		return errors.New("checksum mismatch")
	}
	return nil
}

// killChild writes records forever (overwrites, create-only, If-Match
// updates, deletes) until the parent kills it. It prints one line once the
// store is open, so the parent kills it while it writes.
func killChild(dir string, seed uint64) error {
	ctx := context.Background()
	s, err := file.Open(dir)
	if err != nil {
		return err
	}
	var key32 [32]byte
	binary.LittleEndian.PutUint64(key32[:], seed)
	src := rand.NewChaCha8(key32)
	rng := rand.New(src)
	payload := make([]byte, 1<<20)
	src.Read(payload)
	fmt.Println("ready")
	for i := 0; ; i++ {
		size := 1 + rng.IntN(1<<rng.IntN(21)) // 1 B .. 1 MiB, mostly small
		off := rng.IntN(len(payload) - size + 1)
		data := record(payload[off : off+size])
		key := fmt.Sprintf("obj/%02d", rng.IntN(16))
		switch rng.IntN(4) {
		case 0:
			_, err = s.Put(ctx, key, data, objstore.PutOptions{})
		case 1:
			key = fmt.Sprintf("new/%d-%d", seed, i%8)
			_, err = s.Put(ctx, key, data, objstore.CreateOnly())
			if errors.Is(err, objstore.ErrPrecondition) {
				err = s.Delete(ctx, key)
			}
		case 2:
			var info objstore.ObjectInfo
			if info, err = s.Head(ctx, key); err == nil {
				_, err = s.Put(ctx, key, data, objstore.IfMatch(info.ETag))
			}
			if errors.Is(err, objstore.ErrNotExist) {
				_, err = s.Put(ctx, key, data, objstore.CreateOnly())
			}
		case 3:
			_, err = s.Put(ctx, "deep/a/b/"+key, data, objstore.PutOptions{})
			if err == nil && rng.IntN(2) == 0 {
				err = s.Delete(ctx, "deep/a/b/"+key)
			}
		}
		if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
			return err
		}
	}
}

// shortOr is full, or short under -short (the edit-test loop); make test
// runs the full count.
func shortOr(full, short int) int {
	if testing.Short() {
		return short
	}
	return full
}

// TestKill9 SIGKILLs a writing subprocess at random moments and checks
// after each kill that every visible object is whole, that List shows no
// temp file, and that reopening removes the dead writer's temp files.
func TestKill9(t *testing.T) {
	t.Parallel()
	kills := crashtest.Count(t, killCountEnv, shortOr(200, 60))
	dir := t.TempDir()
	rng := crashtest.Rand(t, 2)
	start := time.Now()
	midWrite := 0
	for k := range kills {
		c := crashtest.Start(t, crashtest.Command(context.Background(), "^$", killChildEnv+"="+dir, fmt.Sprintf("%s=%d", killSeedEnv, k)))
		if err := c.WaitReady("ready"); err != nil {
			_ = c.Kill()
			t.Fatalf("kill %d: child did not start: %v", k, err)
		}
		// Let it write for a random while, then kill it mid-stride.
		time.Sleep(crashtest.Delay(rng, 25*time.Millisecond))
		if err := c.Kill(); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		if len(tempFiles(t, dir)) > 0 {
			midWrite++
		}
		verifyStore(t, dir, k)
	}
	t.Logf("%d kills in %v; %d left a temp file behind (killed inside Put)", kills, time.Since(start).Round(time.Millisecond), midWrite)
	if kills >= 50 && midWrite == 0 {
		t.Fatal("no kill landed inside a Put; the test did not exercise anything")
	}
}

func verifyStore(t *testing.T, dir string, k int) {
	t.Helper()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatalf("kill %d: reopen: %v", k, err)
	}
	defer s.Close()
	if left := tempFiles(t, dir); len(left) > 0 {
		t.Fatalf("kill %d: temp files of the dead writer survive reopening: %v", k, left)
	}
	after := ""
	for {
		l, err := s.List(bg, "", after, 100)
		if err != nil {
			t.Fatalf("kill %d: List: %v", k, err)
		}
		for _, o := range l {
			if strings.Contains(o.Key, `\`) {
				t.Fatalf("kill %d: List shows temp file %q", k, o.Key)
			}
			b, info, err := s.Get(bg, o.Key)
			if err != nil {
				t.Fatalf("kill %d: Get(%q): %v", k, o.Key, err)
			}
			if err := checkRecord(b); err != nil {
				t.Fatalf("kill %d: object %q is not whole: %v", k, o.Key, err)
			}
			if info.ETag != o.ETag {
				t.Fatalf("kill %d: %q: List ETag %s, Get ETag %s", k, o.Key, o.ETag, info.ETag)
			}
		}
		if len(l) < 100 {
			return
		}
		after = l[len(l)-1].Key
	}
}
