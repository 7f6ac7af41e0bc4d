package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
)

// backends are the stores the gap tests run on; S3 skips without the
// test server `make test` starts.
var backends = []struct {
	name string
	open func(t *testing.T) objstore.Store
}{
	{"mem", func(t *testing.T) objstore.Store { return mem.New() }},
	{"file", func(t *testing.T) objstore.Store {
		s, err := file.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"s3", func(t *testing.T) objstore.Store { return s3test.Open(t) }},
}

const gapPrefix = "db"

func gapOpts() Options {
	o := quietOpts()
	o.Prefix = gapPrefix
	o.DisableAutoCheckpoint = true
	return o
}

// buildLog writes a store with a checkpoint holding a, b and c, then one
// WAL object per key k01..k08, and returns the WAL keys after the
// checkpoint (db/wal/5 .. db/wal/12).
func buildLog(t *testing.T, s objstore.Store) []string {
	t.Helper()
	ctx := context.Background()
	db := mustOpen(t, s, gapOpts()) // fence at 1
	for _, k := range []string{"a", "b", "c"} {
		put(t, db, k, "ckpt") // 2..4
	}
	if err := db.Checkpoint(ctx); err != nil { // first live 5
		t.Fatal(err)
	}
	for i := 1; i <= 8; i++ {
		put(t, db, fmt.Sprintf("k%02d", i), "wal") // 5..12
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for seq := uint64(5); seq <= 12; seq++ {
		keys = append(keys, fmt.Sprintf("%s/wal/%020d", gapPrefix, seq))
	}
	return keys
}

// objectsOf lists every object of the store with its ETag, skipping keys
// for which skip returns true.
func objectsOf(t *testing.T, s objstore.Store, skip func(key string) bool) string {
	t.Helper()
	objs, err := s.List(context.Background(), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, o := range objs {
		if skip == nil || !skip(o.Key) {
			lines = append(lines, o.Key+" "+o.ETag)
		}
	}
	return strings.Join(lines, "\n")
}

func mustGet(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	data, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustPut(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, data, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A damage breaks the log of buildLog at wal[3] (db/wal/8); wal[2]
// (db/wal/7) is the last good object.
var damages = []struct {
	name string
	kind ProblemKind
	do   func(t *testing.T, s objstore.Store, wal []string)
}{
	{"gap", ProblemMissing, func(t *testing.T, s objstore.Store, wal []string) {
		if err := s.Delete(context.Background(), wal[3]); err != nil {
			t.Fatal(err)
		}
	}},
	{"gap of three", ProblemMissing, func(t *testing.T, s objstore.Store, wal []string) {
		for _, k := range wal[3:6] {
			if err := s.Delete(context.Background(), k); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"truncated", ProblemDamaged, func(t *testing.T, s objstore.Store, wal []string) {
		data := mustGet(t, s, wal[3])
		mustPut(t, s, wal[3], data[:len(data)-5])
	}},
	{"reordered", ProblemMisplaced, func(t *testing.T, s objstore.Store, wal []string) {
		a, b := mustGet(t, s, wal[3]), mustGet(t, s, wal[4])
		mustPut(t, s, wal[3], b)
		mustPut(t, s, wal[4], a)
	}},
}

func TestDamagedLogIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends {
		for _, dmg := range damages {
			t.Run(be.name+"/"+dmg.name, func(t *testing.T) {
				s := be.open(t)
				wal := buildLog(t, s)
				dmg.do(t, s, wal)
				bad, lastGood := wal[3], wal[2]
				notManifest := func(k string) bool { return k == gapPrefix+"/manifest" }
				before := objectsOf(t, s, notManifest)

				_, err := Open(ctx, s, gapOpts())
				wantCorrupt(t, "Open", err, bad, lastGood)
				if after := objectsOf(t, s, notManifest); after != before {
					t.Fatalf("refused Open wrote to the store (a fence in the gap?):\nbefore:\n%s\nafter:\n%s", before, after)
				}
				_, err = OpenReader(ctx, s, gapOpts())
				wantCorrupt(t, "OpenReader", err, bad, lastGood)

				cs := counting.New(s)
				all := objectsOf(t, s, nil)
				rep, err := Check(ctx, cs, gapOpts())
				if err != nil {
					t.Fatal(err)
				}
				if c := cs.Counts(); c.Puts != 0 || c.Deletes != 0 {
					t.Fatalf("Check wrote: %+v", c)
				}
				if objectsOf(t, s, nil) != all {
					t.Fatal("Check changed the store")
				}
				if rep.Healthy() || rep.BreakAt != 8 || rep.LastGoodWAL != 7 || rep.Problems[0].Object != bad ||
					rep.Problems[0].Kind != dmg.kind || rep.Problems[0].WAL != 8 {
					t.Fatalf("report: %+v", rep)
				}
				if dmg.kind == ProblemMissing && !strings.Contains(rep.Problems[0].Detail, lastGood) {
					t.Fatalf("gap problem %q does not name the last good object %s", rep.Problems[0], lastGood)
				}
				if rep.Keys != 6 || rep.FirstLiveWAL != 5 {
					t.Fatalf("readable state: %d keys, first live %d; want 6 and 5", rep.Keys, rep.FirstLiveWAL)
				}

				plan, err := PlanTruncate(ctx, cs, gapOpts(), rep.BreakAt)
				if err != nil {
					t.Fatal(err)
				}
				if c := cs.Counts(); c.Puts != 0 || c.Deletes != 0 {
					t.Fatalf("PlanTruncate wrote: %+v", c)
				}
				if plan.Applied || plan.At != 8 || len(plan.Discarded) != 5 || plan.Discarded[0].Object != bad ||
					plan.Discarded[4].Seq != 12 || plan.Keys != 6 {
					t.Fatalf("plan: %+v", plan)
				}
				truncateAndReopen(t, s, plan, "a=ckpt b=ckpt c=ckpt k01=wal k02=wal k03=wal ")
			})
		}
	}
}

// wantCorrupt requires an ErrCorrupt naming the bad object, the last good
// one, and what to do.
func wantCorrupt(t *testing.T, op string, err error, bad, lastGood string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s = %v, want ErrCorrupt", op, err)
	}
	for _, want := range []string{bad, lastGood, "tqw-dsl store check", "docs/OPERATIONS.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s error does not name %q:\n%v", op, want, err)
		}
	}
}

// truncateAndReopen applies plan and checks that the store opens at want,
// is healthy, and takes new commits that survive a reopen.
func truncateAndReopen(t *testing.T, s objstore.Store, plan Truncation, want string) {
	t.Helper()
	ctx := context.Background()
	done, err := TruncateAt(ctx, s, gapOpts(), plan.At)
	if err != nil {
		t.Fatal(err)
	}
	if !done.Applied || done.Commits != plan.Commits || len(done.Discarded) != len(plan.Discarded) || done.FirstLiveWAL <= plan.Discarded[len(plan.Discarded)-1].Seq {
		t.Fatalf("truncation %+v\nplan %+v", done, plan)
	}
	for _, d := range done.Discarded {
		if d.Missing {
			continue
		}
		copied := done.Copies + fmt.Sprintf("wal/%020d", d.Seq)
		if got, want := mustGet(t, s, copied), mustGet(t, s, d.Object); string(got) != string(want) {
			t.Fatalf("copy %s differs from %s", copied, d.Object)
		}
	}
	if rep, err := Check(ctx, s, gapOpts()); err != nil || !rep.Healthy() {
		t.Fatalf("after truncation: %+v, %v", rep, err)
	}
	r, err := OpenReader(ctx, s, gapOpts())
	if err != nil {
		t.Fatal(err)
	}
	if got := dump(t, r.Scan, Range{}); got != want {
		t.Fatalf("reader after truncation: %q, want %q", got, want)
	}
	r.Close()
	db := mustOpen(t, s, gapOpts())
	if got := dump(t, db.Scan, Range{}); got != want {
		t.Fatalf("after truncation: %q, want %q", got, want)
	}
	put(t, db, "new", "1")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, s, gapOpts())
	defer db.Close()
	if v, ok := get(t, db, "new"); !ok || v != "1" {
		t.Fatal("commit after the truncation lost")
	}
	if rep, err := Check(ctx, s, gapOpts()); err != nil || !rep.Healthy() {
		t.Fatalf("after reopening the truncated store: %+v, %v", rep, err)
	}
}

// TestWriterNeverWritesIntoAGap: a hole at the first live sequence (no
// object after the checkpoint readable) and a store whose WAL is whole
// again after a restore.
func TestWriterNeverWritesIntoAGap(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	wal := buildLog(t, s)
	saved := mustGet(t, s, wal[0])
	if err := s.Delete(ctx, wal[0]); err != nil {
		t.Fatal(err)
	}
	for range 3 { // every attempt is refused the same way, nothing fills the hole
		_, err := Open(ctx, s, gapOpts())
		wantCorrupt(t, "Open", err, wal[0], "the checkpoint")
		if _, err := s.Head(ctx, wal[0]); !errors.Is(err, objstore.ErrNotExist) {
			t.Fatalf("Open wrote into the hole: %v", err)
		}
	}
	// Restored from a backup: everything is back.
	if _, err := s.Put(ctx, wal[0], saved, objstore.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	db := mustOpen(t, s, gapOpts())
	defer db.Close()
	if got, want := dump(t, db.Scan, Range{}), "a=ckpt b=ckpt c=ckpt k01=wal k02=wal k03=wal k04=wal k05=wal k06=wal k07=wal k08=wal "; got != want {
		t.Fatalf("after the restore: %q, want %q", got, want)
	}
}

func TestCheckpointDamageIsRefused(t *testing.T) {
	ctx := context.Background()
	chunkOf := func(t *testing.T, s objstore.Store) string {
		objs, err := s.List(ctx, gapPrefix+"/chunk/", "", 0)
		if err != nil || len(objs) == 0 {
			t.Fatalf("no chunk: %v", err)
		}
		return objs[0].Key
	}
	cases := []struct {
		name   string
		kind   ProblemKind
		damage func(t *testing.T, s objstore.Store) string
	}{
		{"chunk missing", ProblemMissing, func(t *testing.T, s objstore.Store) string {
			k := chunkOf(t, s)
			if err := s.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			return k
		}},
		{"chunk damaged", ProblemDamaged, func(t *testing.T, s objstore.Store) string {
			k := chunkOf(t, s)
			data := mustGet(t, s, k)
			mustPut(t, s, k, data[:len(data)-2])
			return k
		}},
		{"manifest missing", ProblemMissing, func(t *testing.T, s objstore.Store) string {
			k := gapPrefix + "/manifest"
			if err := s.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			return k
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mem.New()
			buildLog(t, s)
			bad := c.damage(t, s)
			before := objectsOf(t, s, nil)
			_, err := Open(ctx, s, gapOpts())
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
				t.Fatalf("Open = %v, want ErrCorrupt naming %s", err, bad)
			}
			if c.name == "manifest missing" && objectsOf(t, s, nil) != before {
				t.Fatal("Open created a fresh manifest over the orphaned log")
			}
			if c.name != "manifest missing" {
				if _, err := OpenReader(ctx, s, gapOpts()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
					t.Fatalf("OpenReader = %v, want ErrCorrupt naming %s", err, bad)
				}
			}
			rep, err := Check(ctx, s, gapOpts())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) != 1 || rep.Problems[0].Object != bad || rep.Problems[0].Kind != c.kind || rep.BreakAt != 0 {
				t.Fatalf("report %+v", rep)
			}
			if _, err := TruncateAt(ctx, s, gapOpts(), 8); err == nil || !strings.Contains(err.Error(), "restore") {
				t.Fatalf("TruncateAt on a damaged checkpoint = %v, want a refusal saying to restore", err)
			}
		})
	}
}

func TestCheckHealthyStore(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	opts := gapOpts()
	opts.ChunkBytes = 200
	db := mustOpen(t, s, opts)
	for i := range 40 {
		put(t, db, fmt.Sprintf("k%03d", i), strings.Repeat("v", 20))
	}
	big := strings.Repeat("L", opts.withDefaults().LargeValueThreshold+1)
	put(t, db, "big1", big)
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, db, "big2", big)
	put(t, db, "k000", "changed")
	db.Close()
	db = mustOpen(t, s, opts) // a second fence
	db.Close()

	cs := counting.New(s)
	rep, err := Check(ctx, cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Healthy() || !rep.Exists || rep.Keys != 42 || rep.LargeValues != 2 || rep.Chunks < 3 ||
		rep.Commits != 2 || rep.Fences != 1 || rep.BreakAt != 0 || rep.LastGoodWAL != rep.FirstLiveWAL+2 {
		t.Fatalf("report %+v", rep)
	}
	c := cs.Counts()
	if c.Puts != 0 || c.Deletes != 0 {
		t.Fatalf("Check wrote: %+v", c)
	}
	// The cost doc.go states: manifest + chunks + WAL objects GETs, one
	// LIST each of large/ and wal/.
	if want := int64(1 + rep.Chunks + rep.WALObjects); c.Gets != want || c.Lists != 2 {
		t.Fatalf("Check made %d GETs and %d LISTs; want %d and 2", c.Gets, c.Lists, want)
	}

	// A dangling large value is a problem; a store that is not there is not.
	if err := s.Delete(ctx, firstKey(t, s, gapPrefix+"/large/")); err != nil {
		t.Fatal(err)
	}
	rep, err = Check(ctx, s, opts)
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != ProblemMissing || !strings.Contains(rep.Problems[0].Detail, "big") {
		t.Fatalf("after deleting a large value: %+v, %v", rep, err)
	}
	rep, err = Check(ctx, s, Options{Prefix: "nothing-here"})
	if err != nil || rep.Exists || !rep.Healthy() {
		t.Fatalf("empty prefix: %+v, %v", rep, err)
	}
}

func firstKey(t *testing.T, s objstore.Store, prefix string) string {
	t.Helper()
	objs, err := s.List(context.Background(), prefix, "", 1)
	if err != nil || len(objs) == 0 {
		t.Fatalf("nothing under %s: %v", prefix, err)
	}
	return objs[0].Key
}

// readOnly fails every write.
type readOnly struct{ objstore.Store }

var errStoreReadOnly = errors.New("read-only store")

func (readOnly) Put(context.Context, string, []byte, objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, errStoreReadOnly
}
func (readOnly) Delete(context.Context, string) error { return errStoreReadOnly }

func TestReadOnlyStore(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	wal := buildLog(t, s)
	ro := readOnly{s}
	rep, err := Check(ctx, ro, gapOpts())
	if err != nil || !rep.Healthy() {
		t.Fatalf("Check on a read-only store: %+v, %v", rep, err)
	}
	r, err := OpenReader(ctx, ro, gapOpts())
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := s.Delete(ctx, wal[3]); err != nil {
		t.Fatal(err)
	}
	if rep, err := Check(ctx, ro, gapOpts()); err != nil || rep.BreakAt != 8 {
		t.Fatalf("Check of a gap on a read-only store: %+v, %v", rep, err)
	}
	if _, err := PlanTruncate(ctx, ro, gapOpts(), 8); err != nil {
		t.Fatalf("PlanTruncate on a read-only store: %v", err)
	}
}

func TestTruncatePoints(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	buildLog(t, s)
	if err := s.Delete(ctx, gapPrefix+"/wal/00000000000000000010"); err != nil {
		t.Fatal(err)
	}
	for _, at := range []uint64{4, 11, 13, 99} { // below the checkpoint, past the break, past the end
		if _, err := PlanTruncate(ctx, s, gapOpts(), at); !errors.Is(err, ErrTruncatePoint) {
			t.Errorf("PlanTruncate(%d) = %v, want ErrTruncatePoint", at, err)
		}
		before := objectsOf(t, s, nil)
		if _, err := TruncateAt(ctx, s, gapOpts(), at); !errors.Is(err, ErrTruncatePoint) {
			t.Errorf("TruncateAt(%d) = %v, want ErrTruncatePoint", at, err)
		}
		if objectsOf(t, s, nil) != before {
			t.Fatalf("refused TruncateAt(%d) changed the store", at)
		}
	}
	// Cutting earlier than the break is allowed: it discards more.
	plan, err := PlanTruncate(ctx, s, gapOpts(), 8)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Commits != 4 || plan.Missing != 1 || !slices.Equal(plan.Epochs, []uint64{1}) {
		t.Fatalf("plan %+v", plan)
	}
	truncateAndReopen(t, s, plan, "a=ckpt b=ckpt c=ckpt k01=wal k02=wal k03=wal ")
}

// TestTruncateDropsKeysWithoutValue: a discarded commit replaced a large
// value, and its writer deleted the object; the kept state cannot read it.
func TestTruncateDropsKeysWithoutValue(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, gapOpts()) // fence 1
	big := strings.Repeat("L", 70<<10)
	put(t, db, "x", big)     // 2
	put(t, db, "y", "1")     // 3
	put(t, db, "x", "small") // 4: drops x's large value, deleted once durable
	put(t, db, "z", "1")     // 5
	db.Close()
	if objs, _ := s.List(ctx, gapPrefix+"/large/", "", 0); len(objs) != 0 {
		t.Fatalf("the replaced large value is still stored: %v", objs)
	}
	if err := s.Delete(ctx, gapPrefix+"/wal/00000000000000000004"); err != nil {
		t.Fatal(err)
	}
	plan, err := PlanTruncate(ctx, s, gapOpts(), 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.DroppedKeys, []string{"x"}) || plan.Keys != 1 {
		t.Fatalf("plan %+v", plan)
	}
	truncateAndReopen(t, s, plan, "y=1 ")
}

// TestTruncateFencesALiveWriter: a writer still running when its log is
// cut can never commit past the cut.
func TestTruncateFencesALiveWriter(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, gapOpts()) // fence 1
	for i := range 5 {
		put(t, db, fmt.Sprintf("k%d", i), "v") // 2..6
	}
	if err := s.Delete(ctx, gapPrefix+"/wal/00000000000000000004"); err != nil {
		t.Fatal(err)
	}
	if _, err := TruncateAt(ctx, s, gapOpts(), 4); err != nil {
		t.Fatal(err)
	}
	err := db.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("late"), []byte("v")) })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("commit of the writer whose log was cut = %v, want ErrFenced", err)
	}
	db.Close()
	db = mustOpen(t, s, gapOpts())
	defer db.Close()
	if got := dump(t, db.Scan, Range{}); got != "k0=v k1=v " {
		t.Fatalf("state %q", got)
	}
}

// hookStore calls onGet before the first GET of a key with the prefix.
type hookStore struct {
	objstore.Store
	prefix string
	once   sync.Once
	onGet  func()
}

func (h *hookStore) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if strings.HasPrefix(key, h.prefix) {
		h.once.Do(h.onGet)
	}
	return h.Store.Get(ctx, key)
}

// TestReaderRacingACheckpoint: the WAL objects a Reader listed are
// deleted by a checkpoint before it reads them. That is no corruption:
// the Reader starts over from the new checkpoint.
func TestReaderRacingACheckpoint(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, gapOpts())
	defer db.Close()
	for i := range 5 {
		put(t, db, fmt.Sprintf("k%d", i), "v")
	}
	hs := &hookStore{Store: s, prefix: gapPrefix + "/wal/", onGet: func() {
		put(t, db, "k9", "v")
		if err := db.Checkpoint(ctx); err != nil {
			t.Error(err)
		}
	}}
	r, err := OpenReader(ctx, hs, gapOpts())
	if err != nil {
		t.Fatalf("Reader racing a checkpoint: %v", err)
	}
	defer r.Close()
	if got, want := dump(t, r.Scan, Range{}), dump(t, db.Scan, Range{}); got != want {
		t.Fatalf("reader %q, writer %q", got, want)
	}
}

// TestOpenRacingANewerWriter: a newer writer opens and checkpoints while
// an opener replays, deleting what it reads: the opener is fenced, not
// told the store is corrupt.
func TestOpenRacingANewerWriter(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, gapOpts())
	for i := range 5 {
		put(t, db, fmt.Sprintf("k%d", i), "v")
	}
	db.Close()
	hs := &hookStore{Store: s, prefix: gapPrefix + "/wal/", onGet: func() {
		newer := mustOpen(t, s, gapOpts())
		put(t, newer, "k9", "v")
		if err := newer.Checkpoint(ctx); err != nil {
			t.Error(err)
		}
		newer.Close()
	}}
	if _, err := Open(ctx, hs, gapOpts()); !errors.Is(err, ErrFenced) {
		t.Fatalf("Open racing a newer writer's checkpoint = %v, want ErrFenced", err)
	}
	db = mustOpen(t, s, gapOpts())
	defer db.Close()
	if got := dump(t, db.Scan, Range{}); got != "k0=v k1=v k2=v k3=v k4=v k9=v " {
		t.Fatalf("state %q", got)
	}
}

// TestCheckReportsEveryProblem: problems in log order, one per object or
// gap, also after the log broke.
func TestCheckReportsEveryProblem(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	wal := buildLog(t, s)
	if err := s.Delete(ctx, wal[1]); err != nil { // 6
		t.Fatal(err)
	}
	data := mustGet(t, s, wal[4])
	data[len(data)/2] ^= 0x40
	mustPut(t, s, wal[4], data)  // 9
	for _, k := range wal[5:7] { // 10, 11
		if err := s.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Check(ctx, s, gapOpts())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, fmt.Sprintf("%d %s", p.WAL, p.Kind))
	}
	if want := []string{"6 missing", "9 damaged", "10 missing"}; !slices.Equal(got, want) {
		t.Fatalf("problems %v, want %v\n%+v", got, want, rep.Problems)
	}
	if rep.BreakAt != 6 || rep.LastGoodWAL != 5 || !strings.Contains(rep.Problems[2].Detail, "as is the next object") {
		t.Fatalf("report %+v", rep)
	}
}

// TestLiveWriterCheckpointHealsAGap: a WAL object deleted under a writer
// that is still running loses nothing if that writer checkpoints before
// it stops (docs/OPERATIONS.md relies on it).
func TestLiveWriterCheckpointHealsAGap(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, gapOpts())
	for i := range 6 {
		put(t, db, fmt.Sprintf("k%d", i), "v")
	}
	if err := s.Delete(ctx, gapPrefix+"/wal/00000000000000000004"); err != nil {
		t.Fatal(err)
	}
	if rep, err := Check(ctx, s, gapOpts()); err != nil || rep.BreakAt != 4 {
		t.Fatalf("check of the gap: %+v, %v", rep, err)
	}
	put(t, db, "k6", "v")
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err := Check(ctx, s, gapOpts()); err != nil || !rep.Healthy() {
		t.Fatalf("check after the writer's checkpoint: %+v, %v", rep, err)
	}
	want := dump(t, db.Scan, Range{})
	db.Close()
	db = mustOpen(t, s, gapOpts())
	defer db.Close()
	if got := dump(t, db.Scan, Range{}); got != want || !strings.Contains(got, "k2=v") {
		t.Fatalf("after reopen %q, want %q", got, want)
	}
}

// TestReaderRefreshFindsAGap: a gap that appears after the Reader opened
// stops its Refresh, which keeps the state it had.
func TestReaderRefreshFindsAGap(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, gapOpts()) // fence 1
	put(t, db, "a", "1")            // 2
	r, err := OpenReader(ctx, s, gapOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, k := range []string{"b", "c", "d"} {
		put(t, db, k, "1") // 3..5
	}
	defer db.Close()
	if err := s.Delete(ctx, gapPrefix+"/wal/00000000000000000004"); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, "Refresh", r.Refresh(ctx), gapPrefix+"/wal/00000000000000000004", gapPrefix+"/wal/00000000000000000003")
	if got := dump(t, r.Scan, Range{}); got != "a=1 " {
		t.Fatalf("reader state after a refused Refresh: %q", got)
	}
}

// TestIssue11WALGap is the report of issue 11: one WAL object deleted in
// the middle of a store. Open succeeded with the commits before it,
// wrote its fence into the hole, and every later Open failed blaming "a
// fenced writer wrote past a fence". Now every Open refuses, naming the
// hole, and the hole stays empty.
func TestIssue11WALGap(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, quietOpts()) // fence at wal 1
	for i := 1; i <= 10; i++ {
		put(t, db, fmt.Sprintf("k%02d", i), "v") // wal 2..11
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	hole, lastGood := "wal/00000000000000000006", "wal/00000000000000000005"
	if err := s.Delete(ctx, hole); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		db, err := Open(ctx, s, quietOpts())
		if err == nil {
			state := dump(t, db.Scan, Range{})
			db.Close()
			t.Fatalf("Open %d succeeded with %s missing, state %q", attempt, hole, state)
		}
		wantCorrupt(t, fmt.Sprintf("Open %d", attempt), err, hole, lastGood)
		if strings.Contains(err.Error(), "fenced writer") {
			t.Fatalf("Open %d blames a fenced writer: %v", attempt, err)
		}
		if _, err := s.Head(ctx, hole); !errors.Is(err, objstore.ErrNotExist) {
			t.Fatalf("Open %d wrote into the hole: %v", attempt, err)
		}
	}
}
