package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

var bg = context.Background()

func mustPut(t *testing.T, s objstore.Store, key, data string, opts objstore.PutOptions) objstore.ObjectInfo {
	t.Helper()
	info, err := s.Put(bg, key, []byte(data), opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

func mustGet(t *testing.T, s objstore.Store, key string) string {
	t.Helper()
	b, _, err := s.Get(bg, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(b)
}

func listKeys(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		l, err := s.List(bg, prefix, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l {
			out = append(out, o.Key)
		}
		if len(l) < 7 {
			return out
		}
		after = l[len(l)-1].Key
	}
}

// segments returns the segment files of the packed folder dir, oldest
// first.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, logDirName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if _, err := strconv.ParseUint(de.Name(), 10, 64); err == nil {
			out = append(out, filepath.Join(dir, logDirName, de.Name()))
		}
	}
	sort.Strings(out)
	return out
}

func packAt(t *testing.T, dir, prefix string, segSize int64) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if segSize > 0 {
		s.segMin, s.segMax = segSize, segSize
	}
	if err := s.Pack(bg, prefix); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPackedLayout(t *testing.T) {
	dir := t.TempDir()
	s := packAt(t, dir, "wal/", 4096)
	for i := range 60 {
		mustPut(t, s, fmt.Sprintf("wal/%020d", i), strings.Repeat("x", i), objstore.CreateOnly())
	}
	mustPut(t, s, "wal/sub/deeper", "plain", objstore.PutOptions{})
	mustPut(t, s, "other", "plain", objstore.PutOptions{})
	des, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	// The folder's own objects are in the log; a deeper key is a file.
	if fmt.Sprint(names) != fmt.Sprint([]string{logDirName, "sub"}) {
		t.Fatalf("folder holds %v, want only the log and the sub-folder", names)
	}
	if n := len(segments(t, filepath.Join(dir, "wal"))); n < 2 {
		t.Fatalf("%d segments for 60 records in 4 KiB segments; want several", n)
	}
	for i := range 60 {
		if got := mustGet(t, s, fmt.Sprintf("wal/%020d", i)); got != strings.Repeat("x", i) {
			t.Fatalf("wal/%d = %q", i, got)
		}
	}
	if got := listKeys(t, s, ""); len(got) != 62 || got[0] != "other" || got[61] != "wal/sub/deeper" {
		t.Fatalf("List = %v", got)
	}
	// A second handle (another process) reads the same, from the bytes.
	s2 := packAt(t, dir, "wal/", 4096)
	if got, want := listKeys(t, s2, "wal/"), listKeys(t, s, "wal/"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("second handle lists %v, want %v", got, want)
	}
	if err := s.Pack(bg, "wal"); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("Pack without a trailing slash = %v, want ErrInvalidKey", err)
	}
}

// Two handles on one root stand for two processes: each sees the other's
// writes at once, create-only holds across them, and If-Match makes a
// counter neither loses an increment of.
func TestPackedTwoHandles(t *testing.T) {
	dir := t.TempDir()
	a, b := packAt(t, dir, "wal/", 4096), packAt(t, dir, "wal/", 4096)
	mustPut(t, a, "wal/1", "a", objstore.CreateOnly())
	if got := mustGet(t, b, "wal/1"); got != "a" {
		t.Fatalf("b reads %q", got)
	}
	if _, err := b.Put(bg, "wal/1", []byte("b"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("b's create-only over a's object = %v", err)
	}
	mustPut(t, b, "wal/2", "b", objstore.CreateOnly())
	if got := mustGet(t, a, "wal/2"); got != "b" {
		t.Fatalf("a reads %q", got)
	}
	if err := a.Delete(bg, "wal/2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(bg, "wal/2"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("b sees a deleted object: %v", err)
	}

	// Racing creators: exactly one wins each key.
	var wg sync.WaitGroup
	wins := make([]map[string]bool, 4)
	for w := range wins {
		wins[w] = map[string]bool{}
		s := []*Store{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 40 {
				key := fmt.Sprintf("wal/race-%02d", k)
				_, err := s.Put(bg, key, []byte(strconv.Itoa(w)), objstore.CreateOnly())
				if err == nil {
					wins[w][key] = true
				} else if !errors.Is(err, objstore.ErrPrecondition) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for k := range 40 {
		key := fmt.Sprintf("wal/race-%02d", k)
		n, winner := 0, -1
		for w := range wins {
			if wins[w][key] {
				n, winner = n+1, w
			}
		}
		if n != 1 || mustGet(t, a, key) != strconv.Itoa(winner) || mustGet(t, b, key) != strconv.Itoa(winner) {
			t.Fatalf("%s: %d winners (last %d); a reads %q, b %q", key, n, winner, mustGet(t, a, key), mustGet(t, b, key))
		}
	}

	// An If-Match counter from both handles.
	mustPut(t, a, "wal/n", "0", objstore.CreateOnly())
	for w := range 4 {
		s := []*Store{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				for {
					v, info, err := s.Get(bg, "wal/n")
					if err != nil {
						t.Error(err)
						return
					}
					n, _ := strconv.Atoi(string(v))
					_, err = s.Put(bg, "wal/n", []byte(strconv.Itoa(n+1)), objstore.IfMatch(info.ETag))
					if err == nil {
						break
					}
					if !errors.Is(err, objstore.ErrPrecondition) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := mustGet(t, b, "wal/n"); got != "100" {
		t.Fatalf("counter = %s, want 100", got)
	}
}

// A folder with objects written before it was packed keeps them: they
// read, list and delete as before, block create-only Puts of their key,
// and a Put that replaces one moves it into the log.
func TestPackedLegacyObjects(t *testing.T) {
	dir := t.TempDir()
	old, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"wal/1", "wal/3", "wal/5"} {
		mustPut(t, old, k, "old "+k, objstore.CreateOnly())
	}
	old.Close()

	s := packAt(t, dir, "wal/", 0)
	mustPut(t, s, "wal/2", "new 2", objstore.CreateOnly())
	mustPut(t, s, "wal/4", "new 4", objstore.CreateOnly())
	if got := listKeys(t, s, "wal/"); fmt.Sprint(got) != "[wal/1 wal/2 wal/3 wal/4 wal/5]" {
		t.Fatalf("List = %v", got)
	}
	if got := mustGet(t, s, "wal/3"); got != "old wal/3" {
		t.Fatalf("legacy object reads %q", got)
	}
	if _, err := s.Put(bg, "wal/3", []byte("x"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("create-only over a legacy object = %v", err)
	}
	info, err := s.Head(bg, "wal/5")
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "wal/5", "replaced", objstore.IfMatch(info.ETag))
	if _, err := os.Stat(filepath.Join(dir, "wal", "5")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("replaced legacy file still there: %v", err)
	}
	if err := s.Delete(bg, "wal/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "wal", "1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted legacy file still there: %v", err)
	}
	s2 := packAt(t, dir, "wal/", 0)
	if got := listKeys(t, s2, "wal/"); fmt.Sprint(got) != "[wal/2 wal/3 wal/4 wal/5]" {
		t.Fatalf("List from another handle = %v", got)
	}
	if got := mustGet(t, s2, "wal/5"); got != "replaced" {
		t.Fatalf("wal/5 = %q", got)
	}
	mustPut(t, s2, "wal/1", "again", objstore.CreateOnly())
}

// Deleted objects free their segments: the oldest segment goes once it
// holds no current object, and one that holds only a few (like kv's
// fences, kept forever) has them moved forward first. Disk use stays
// bounded by what is current.
func TestPackedReclaim(t *testing.T) {
	dir := t.TempDir()
	s := packAt(t, dir, "wal/", 4096)
	keep := map[string]string{}
	for i := range 600 {
		key := fmt.Sprintf("wal/%020d", i)
		val := strings.Repeat("v", 100)
		if i%97 == 0 {
			val = "fence " + strconv.Itoa(i)
			keep[key] = val
		}
		mustPut(t, s, key, val, objstore.CreateOnly())
		if i >= 20 && (i-20)%97 != 0 {
			if err := s.Delete(bg, fmt.Sprintf("wal/%020d", i-20)); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := len(segments(t, filepath.Join(dir, "wal")))
	// 600 records of ~180 bytes fill ~30 segments of 4 KiB; what is
	// current (20 values, 7 fences, tombstones) needs a handful.
	if n > 8 {
		t.Fatalf("%d segments left; retired segments are not deleted", n)
	}
	for _, h := range []*Store{s, packAt(t, dir, "wal/", 4096)} {
		for k, v := range keep {
			if got := mustGet(t, h, k); got != v {
				t.Fatalf("%s = %q, want %q", k, got, v)
			}
		}
		if got := len(listKeys(t, h, "wal/")); got != 20+len(keep)-1 {
			t.Fatalf("List finds %d objects, want %d", got, 20+len(keep)-1)
		}
	}
}

// corrupt overwrites n bytes at off of file path.
func corruptFile(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// recordOffsets returns where the records of a segment file start.
func recordOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeSegHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	sc := scanner{r: bytesAt{b, 0}, salt: h.salt, limit: int64(len(b))}
	sc.scan(segHeaderLen, false, func(off int64, _ rec) { offs = append(offs, off) })
	return offs
}

// A write torn by a crash leaves bytes that are no record at the end of
// the log. They are never read as an object, and the next writer starts a
// new segment instead of writing after them.
func TestPackedTornTail(t *testing.T) {
	dir := t.TempDir()
	func() {
		s := packAt(t, dir, "", 0)
		for i := range 5 {
			mustPut(t, s, fmt.Sprintf("k%d", i), strings.Repeat("d", 50), objstore.CreateOnly())
		}
		s.Close()
	}()
	seg := segments(t, dir)[0]
	offs := recordOffsets(t, seg)
	end := offs[4] + recordSize(2, 50)
	// The torn record: a valid header and key whose data never arrived.
	img, _ := os.ReadFile(seg)
	torn := appendRecord(nil, [16]byte(img[8:24]), end, kindPut, "k5", []byte(strings.Repeat("t", 50)), [16]byte{1}, time.Unix(0, 0))
	corruptFile(t, seg, end, torn[:recHeaderLen+10])

	s := packAt(t, dir, "", 0)
	if _, err := s.Head(bg, "k5"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("torn record read as an object: %v", err)
	}
	if got := listKeys(t, s, ""); fmt.Sprint(got) != "[k0 k1 k2 k3 k4]" {
		t.Fatalf("List = %v", got)
	}
	mustPut(t, s, "k5", "after the crash", objstore.CreateOnly())
	p := s.packs[""]
	if r, ok := p.idx.Get(&record{key: "k5"}); !ok || r.seg.num != 2 {
		t.Fatalf("the write after a torn one went to segment %v, want a new one (2)", r)
	}
	s3 := packAt(t, dir, "", 0)
	if got := mustGet(t, s3, "k5"); got != "after the crash" {
		t.Fatalf("k5 = %q", got)
	}
	if got := listKeys(t, s3, ""); fmt.Sprint(got) != "[k0 k1 k2 k3 k4 k5]" {
		t.Fatalf("List = %v", got)
	}
}

// After a power failure the bytes of an unflushed write may survive in
// part: an earlier record lost (zeros) and a later one whole. That later
// record was never acknowledged; it must not come back when the log goes
// on, since a newer write may have taken its key meanwhile.
func TestPackedLostPageKeepsLaterRecordOut(t *testing.T) {
	dir := t.TempDir()
	func() {
		s := packAt(t, dir, "", 0)
		for i := range 4 {
			mustPut(t, s, fmt.Sprintf("k%d", i), strings.Repeat("d", 100), objstore.CreateOnly())
		}
		s.Close()
	}()
	seg := segments(t, dir)[0]
	offs := recordOffsets(t, seg)
	corruptFile(t, seg, offs[2], make([]byte, recordSize(2, 100))) // k2 lost, k3 intact
	for round := range 3 {
		s := packAt(t, dir, "", 0)
		if _, err := s.Head(bg, "k3"); !errors.Is(err, objstore.ErrNotExist) {
			t.Fatalf("round %d: a record after the lost one came back: %v", round, err)
		}
		mustPut(t, s, fmt.Sprintf("n%d", round), "new", objstore.CreateOnly())
		s.Close()
	}
	s := packAt(t, dir, "", 0)
	if got := listKeys(t, s, ""); fmt.Sprint(got) != "[k0 k1 n0 n1 n2]" {
		t.Fatalf("List = %v", got)
	}
}

// Damage inside a finished segment loses the objects it hits, not the
// ones after it; a damaged segment header loses that segment's objects.
// kv sees either as missing WAL objects, a gap it reports.
func TestPackedDamage(t *testing.T) {
	dir := t.TempDir()
	s := packAt(t, dir, "", 4096)
	for i := range 110 {
		mustPut(t, s, fmt.Sprintf("k%03d", i), strings.Repeat("d", 100), objstore.CreateOnly())
	}
	s.Close()
	segs := segments(t, dir)
	if len(segs) < 5 {
		t.Fatalf("%d segments, want 5 or more", len(segs))
	}
	offs := recordOffsets(t, segs[1])
	corruptFile(t, segs[1], offs[1]+recHeaderLen+5, []byte("!")) // in the data of the 2nd record
	corruptFile(t, segs[3], 30, []byte("!"))                     // in the header's salt

	s2 := packAt(t, dir, "", 4096)
	got := map[string]bool{}
	for _, k := range listKeys(t, s2, "") {
		got[k] = true
		if v := mustGet(t, s2, k); v != strings.Repeat("d", 100) {
			t.Fatalf("%s = %q", k, v)
		}
	}
	perSeg := len(offs)
	lost := 1 + perSeg // one record of segment 2, all of segment 4
	if len(got) != 110-lost {
		t.Fatalf("%d objects readable, want %d: %v", len(got), 110-lost, got)
	}
	if !got[fmt.Sprintf("k%03d", perSeg+2)] {
		t.Fatal("the object after the damaged one is lost too")
	}
}

// An old segment full of long-lived objects must not keep every later
// segment on disk once those are garbage: segments go oldest first, so
// the old one's objects move forward.
func TestPackedReclaimBehindLongLived(t *testing.T) {
	dir := t.TempDir()
	s := packAt(t, dir, "wal/", 4096)
	for i := range 20 { // fills the first segment with objects that stay
		mustPut(t, s, fmt.Sprintf("wal/keep%02d", i), strings.Repeat("k", 100), objstore.CreateOnly())
	}
	for i := range 2000 {
		key := fmt.Sprintf("wal/tmp%05d", i)
		mustPut(t, s, key, strings.Repeat("t", 100), objstore.CreateOnly())
		if err := s.Delete(bg, key); err != nil {
			t.Fatal(err)
		}
	}
	// Current: 20 objects of ~160 bytes; 2000 puts and deletes wrote
	// ~150 segments of 4 KiB.
	if n := len(segments(t, filepath.Join(dir, "wal"))); n > 12 {
		t.Fatalf("%d segments left behind a segment of long-lived objects", n)
	}
	for _, h := range []*Store{s, packAt(t, dir, "wal/", 4096)} {
		if got := len(listKeys(t, h, "wal/")); got != 20 {
			t.Fatalf("List finds %d objects, want 20", got)
		}
		if got := mustGet(t, h, "wal/keep07"); got != strings.Repeat("k", 100) {
			t.Fatalf("keep07 = %q", got)
		}
	}
}

// Damage in the segment still being written is read past too, by a handle
// that only reads: it must not take the log for ending at the damage,
// which would hide acknowledged objects until some writer sealed it.
func TestPackedDamageInLastSegment(t *testing.T) {
	dir := t.TempDir()
	s := packAt(t, dir, "", 0)
	for i := range 10 {
		mustPut(t, s, fmt.Sprintf("k%d", i), strings.Repeat("d", 100), objstore.CreateOnly())
	}
	segs := segments(t, dir)
	offs := recordOffsets(t, segs[len(segs)-1])
	corruptFile(t, segs[len(segs)-1], offs[3]+recHeaderLen+4, []byte("!"))
	r := packAt(t, dir, "", 0)
	if got := listKeys(t, r, ""); fmt.Sprint(got) != "[k0 k1 k2 k4 k5 k6 k7 k8 k9]" {
		t.Fatalf("a reader lists %v past damage in the last segment", got)
	}
	// The writer, which never reads its own segment back, goes on; every
	// handle sees its new object after the damaged one.
	mustPut(t, s, "k10", "new", objstore.CreateOnly())
	if got := mustGet(t, r, "k10"); got != "new" {
		t.Fatalf("k10 = %q", got)
	}
}

// A handle that builds its index while a writer retires the oldest
// segments must not take them for segments removed by hand: it would read
// the last one it opened past the end its successor's header declares,
// and find there a record its writer left out (here z2, which followed
// a lost record).
func TestPackedBuildRacesReclaim(t *testing.T) {
	dir := t.TempDir()
	func() {
		s := packAt(t, dir, "", 4096)
		for i := range 15 {
			mustPut(t, s, fmt.Sprintf("a%02d", i), strings.Repeat("a", 100), objstore.CreateOnly())
		}
		mustPut(t, s, "z1", strings.Repeat("z", 100), objstore.CreateOnly())
		mustPut(t, s, "z2", strings.Repeat("z", 100), objstore.CreateOnly())
		s.Close()
	}()
	seg1 := segments(t, dir)[0]
	offs := recordOffsets(t, seg1)
	corruptFile(t, seg1, offs[15], make([]byte, recordSize(2, 100))) // z1 lost, z2 intact
	w := packAt(t, dir, "", 4096)
	if _, err := w.Head(bg, "z2"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("z2 after a lost record: %v, want ErrNotExist", err)
	}
	var tkeys []string
	for i := 0; len(segments(t, dir)) < 3; i++ {
		k := fmt.Sprintf("t%03d", i)
		mustPut(t, w, k, strings.Repeat("t", 100), objstore.CreateOnly())
		tkeys = append(tkeys, k)
	}
	raced := false
	testBeforeOpenSegment = func(n uint64) {
		if n != 2 || raced {
			return
		}
		raced = true
		// The reader opened segment 1; retire it and segment 2.
		for i := range 15 {
			if err := w.Delete(bg, fmt.Sprintf("a%02d", i)); err != nil {
				t.Error(err)
			}
		}
		for _, k := range tkeys {
			if err := w.Delete(bg, k); err != nil {
				t.Error(err)
			}
		}
		for _, seg := range segments(t, dir) {
			if filepath.Base(seg) <= segName(2) {
				t.Errorf("segment %s not retired", seg)
			}
		}
	}
	t.Cleanup(func() { testBeforeOpenSegment = nil })
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Head(bg, "z2"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("a handle that built its index during a reclaim sees z2: %v, want ErrNotExist", err)
	}
	if !raced {
		t.Fatal("the reclaim did not run during the build")
	}
	if got := listKeys(t, r, ""); len(got) != 0 {
		t.Fatalf("List = %v, want nothing", got)
	}
}

// A handle whose segments another handle retired while it was idle (it
// made two segments since and deleted every object of the older ones)
// must find the live ones: a writer that took its old segment for the
// current one would decide create-only writes on a stale index and
// append to a deleted file.
func TestPackedIdleHandleOutlivesItsSegments(t *testing.T) {
	dir := t.TempDir()
	a, b := packAt(t, dir, "wal/", 4096), packAt(t, dir, "wal/", 4096)
	mustPut(t, a, "wal/a", "a", objstore.CreateOnly()) // a makes and owns segment 1
	first := segments(t, filepath.Join(dir, "wal"))[0]
	for i := 0; ; i++ {
		k := fmt.Sprintf("wal/b%04d", i)
		mustPut(t, b, k, strings.Repeat("b", 100), objstore.CreateOnly())
		if err := b.Delete(bg, k); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(bg, "wal/a"); err != nil {
			t.Fatal(err)
		}
		segs := segments(t, filepath.Join(dir, "wal"))
		if _, err := os.Stat(first); errors.Is(err, os.ErrNotExist) && filepath.Base(segs[0]) > segName(2) {
			break // a's segment and the next are gone
		}
		if i > 1000 {
			t.Fatalf("segments 1 and 2 never retired: %v", segs)
		}
	}
	mustPut(t, b, "wal/taken", "b", objstore.CreateOnly())
	if _, err := a.Put(bg, "wal/taken", []byte("a"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("a's create-only over b's object = %v, want ErrPrecondition", err)
	}
	mustPut(t, a, "wal/later", "a", objstore.CreateOnly())
	if got := mustGet(t, b, "wal/later"); got != "a" {
		t.Fatalf("b reads a's later object as %q", got)
	}
	if _, err := a.Head(bg, "wal/a"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("a still sees the object b deleted: %v", err)
	}
}
