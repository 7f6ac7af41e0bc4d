package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Run runs the contract suite. open must return a new, empty store each
// time it is called; each subtest opens its own.
func Run(t *testing.T, open func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		f    func(t *testing.T, s objstore.Store)
	}{
		{"PutGetHead", testPutGetHead},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"BadKeys", testBadKeys},
		{"BadOptions", testBadOptions},
		{"CreateOnly", testCreateOnly},
		{"IfMatch", testIfMatch},
		{"ListOrder", testListOrder},
		{"ListPrefixAndPages", testListPages},
		{"CancelledContext", testCancelled},
		{"RaceCreateOnly", testRaceCreateOnly},
		{"RaceIfMatchCounter", testRaceCounter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, open(t)) })
	}
}

var bg = context.Background()

func put(t *testing.T, s objstore.Store, key, data string, opts objstore.PutOptions) objstore.ObjectInfo {
	t.Helper()
	info, err := s.Put(bg, key, []byte(data), opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

func get(t *testing.T, s objstore.Store, key string) (string, objstore.ObjectInfo) {
	t.Helper()
	b, info, err := s.Get(bg, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(b), info
}

func testPutGetHead(t *testing.T, s objstore.Store) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for key, data := range map[string][]byte{"k": []byte("hello"), "dir/sub/empty": {}, "dir/big": big, "ünï cødé/ß": []byte("x")} {
		info, err := s.Put(bg, key, data, objstore.PutOptions{})
		if err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
		if info.Key != key || info.Size != int64(len(data)) || info.ETag == "" || info.ModTime.IsZero() {
			t.Fatalf("Put(%q) info = %+v", key, info)
		}
		b, ginfo, err := s.Get(bg, key)
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("Get(%q) = %d bytes, %v; want %d bytes", key, len(b), err, len(data))
		}
		if ginfo.ETag != info.ETag || ginfo.Size != info.Size || ginfo.Key != key {
			t.Fatalf("Get(%q) info %+v, Put info %+v", key, ginfo, info)
		}
		hinfo, err := s.Head(bg, key)
		if err != nil || hinfo.ETag != info.ETag || hinfo.Size != info.Size || hinfo.Key != key {
			t.Fatalf("Head(%q) = %+v, %v; Put info %+v", key, hinfo, err, info)
		}
	}
	// Get returns a copy: changing it does not change the object.
	b, _, _ := s.Get(bg, "k")
	b[0] = 'X'
	if got, _ := get(t, s, "k"); got != "hello" {
		t.Fatalf("object changed through a returned slice: %q", got)
	}
}

func testOverwrite(t *testing.T, s objstore.Store) {
	a := put(t, s, "k", "one", objstore.PutOptions{})
	b := put(t, s, "k", "two!", objstore.PutOptions{})
	if a.ETag == b.ETag {
		t.Fatalf("different content, same ETag %s", a.ETag)
	}
	if got, info := get(t, s, "k"); got != "two!" || info.ETag != b.ETag || info.Size != 4 {
		t.Fatalf("after overwrite: %q %+v", got, info)
	}
	if err := s.Delete(bg, "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(bg, "k"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Get after Delete: %v", err)
	}
	// The key can be created again after a delete, also create-only, and
	// a deleted folder can become an object.
	put(t, s, "k", "three", objstore.CreateOnly())
	put(t, s, "d/x", "1", objstore.PutOptions{})
	if err := s.Delete(bg, "d/x"); err != nil {
		t.Fatal(err)
	}
	put(t, s, "d", "now an object", objstore.CreateOnly())
	if got, _ := get(t, s, "d"); got != "now an object" {
		t.Fatalf("Get(d) = %q", got)
	}
}

func testMissing(t *testing.T, s objstore.Store) {
	put(t, s, "there/x", "1", objstore.PutOptions{})
	for _, key := range []string{"nothing", "there", "there/y", "there/x/deeper"} {
		if _, _, err := s.Get(bg, key); !errors.Is(err, objstore.ErrNotExist) {
			t.Errorf("Get(%q) = %v, want ErrNotExist", key, err)
		}
		if _, err := s.Head(bg, key); !errors.Is(err, objstore.ErrNotExist) {
			t.Errorf("Head(%q) = %v, want ErrNotExist", key, err)
		}
		if err := s.Delete(bg, key); err != nil {
			t.Errorf("Delete(%q) of a missing key = %v, want nil", key, err)
		}
	}
	if got, _ := get(t, s, "there/x"); got != "1" {
		t.Fatal("deleting missing keys removed a neighbour")
	}
	l, err := s.List(bg, "nope/", "", 0)
	if err != nil || len(l) != 0 {
		t.Fatalf("List of an empty prefix = %v, %v", l, err)
	}
}

func testBadKeys(t *testing.T, s objstore.Store) {
	for _, key := range []string{"", "/a", "a/", "a//b", "./a", "a/../b", `a\b`, "a\x00b", "a\nb", "\xff", string(make([]byte, objstore.MaxKeyLen+1))} {
		if _, err := s.Put(bg, key, []byte("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, _, err := s.Get(bg, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Head(bg, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Head(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(bg, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	for _, prefix := range []string{"/", "/a", "a//", `a\`} {
		if _, err := s.List(bg, prefix, "", 0); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("List(%q) = %v, want ErrInvalidKey", prefix, err)
		}
	}
	if l, err := s.List(bg, "", "", 0); err != nil || len(l) != 0 {
		t.Fatalf("bad keys left objects: %v %v", l, err)
	}
}

func testBadOptions(t *testing.T, s objstore.Store) {
	_, err := s.Put(bg, "k", []byte("x"), objstore.PutOptions{IfNoneMatch: true, IfMatch: `"e"`})
	if err == nil || errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("Put with both preconditions = %v, want a usage error", err)
	}
	if _, err := s.Head(bg, "k"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("rejected Put wrote: %v", err)
	}
}

func testCreateOnly(t *testing.T, s objstore.Store) {
	first := put(t, s, "c", "first", objstore.CreateOnly())
	if _, err := s.Put(bg, "c", []byte("second"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("second create-only Put = %v, want ErrPrecondition", err)
	}
	if got, info := get(t, s, "c"); got != "first" || info.ETag != first.ETag {
		t.Fatalf("failed create-only Put changed the object: %q %+v", got, info)
	}
	// Identical bytes do not make it succeed either.
	if _, err := s.Put(bg, "c", []byte("first"), objstore.CreateOnly()); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("create-only Put of identical bytes = %v, want ErrPrecondition", err)
	}
}

func testIfMatch(t *testing.T, s objstore.Store) {
	if _, err := s.Put(bg, "m", []byte("x"), objstore.IfMatch(`"whatever"`)); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("If-Match on a missing object = %v, want ErrPrecondition", err)
	}
	if _, err := s.Head(bg, "m"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("failed If-Match created the object: %v", err)
	}
	v1 := put(t, s, "m", "v1", objstore.PutOptions{})
	v2 := put(t, s, "m", "v2", objstore.IfMatch(v1.ETag))
	if v2.ETag == v1.ETag {
		t.Fatal("If-Match Put kept the ETag")
	}
	if _, err := s.Put(bg, "m", []byte("v3"), objstore.IfMatch(v1.ETag)); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("If-Match with a stale ETag = %v, want ErrPrecondition", err)
	}
	if got, info := get(t, s, "m"); got != "v2" || info.ETag != v2.ETag {
		t.Fatalf("after stale If-Match: %q %+v", got, info)
	}
	head, err := s.Head(bg, "m")
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "m", "v3", objstore.IfMatch(head.ETag))
	l, err := s.List(bg, "m", "", 0)
	if err != nil || len(l) != 1 {
		t.Fatalf("List(m) = %v, %v", l, err)
	}
	put(t, s, "m", "v4", objstore.IfMatch(l[0].ETag)) // List ETags work for If-Match
	if err := s.Delete(bg, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(bg, "m", []byte("v5"), objstore.IfMatch(l[0].ETag)); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("If-Match after Delete = %v, want ErrPrecondition", err)
	}
}

func keys(l []objstore.ObjectInfo) []string {
	out := make([]string, len(l))
	for i, o := range l {
		out[i] = o.Key
	}
	return out
}

func testListOrder(t *testing.T, s objstore.Store) {
	// '-' < '.' < '/' < '0' in bytes: a folder "a" sorts as "a/".
	// No key is the folder of another (see the package doc).
	want := []string{"a-b", "a.b", "a/b-c", "a/b.c", "a/b/c", "a/b0", "a0", "b/a/a", "b/a/b", "b/ab", "é"}
	for i := len(want) - 1; i >= 0; i-- {
		put(t, s, want[i], want[i], objstore.PutOptions{})
	}
	l, err := s.List(bg, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(l); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List order\n got %v\nwant %v", got, want)
	}
	for _, o := range l {
		h, err := s.Head(bg, o.Key)
		if err != nil || h.ETag != o.ETag || o.Size != int64(len(o.Key)) {
			t.Fatalf("List entry %+v, Head %+v %v", o, h, err)
		}
	}
	// Every startAfter position, with and without a prefix.
	for i := -1; i < len(want); i++ {
		after := ""
		if i >= 0 {
			after = want[i]
		}
		l, err := s.List(bg, "", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(l); fmt.Sprint(got) != fmt.Sprint(want[i+1:]) {
			t.Fatalf("List after %q = %v, want %v", after, got, want[i+1:])
		}
	}
	for _, c := range []struct {
		prefix, after string
		want          []string
	}{
		{"a", "", want[:7]},
		{"a/", "", []string{"a/b-c", "a/b.c", "a/b/c", "a/b0"}},
		{"a/b", "a/b", []string{"a/b-c", "a/b.c", "a/b/c", "a/b0"}},
		{"a/b/", "", []string{"a/b/c"}},
		{"a/", "a/b.", []string{"a/b.c", "a/b/c", "a/b0"}},
		{"a/", "a/b/", []string{"a/b/c", "a/b0"}},
		{"a/", "a/b/c", []string{"a/b0"}},
		{"a/", "a/b00", nil},
		{"b/", "a", []string{"b/a/a", "b/a/b", "b/ab"}},
		{"b/a", "b/a/a", []string{"b/a/b", "b/ab"}},
		{"b", "zzz", nil},
		{"c", "", nil},
	} {
		l, err := s.List(bg, c.prefix, c.after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(l); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("List(prefix %q, after %q) = %v, want %v", c.prefix, c.after, got, c.want)
		}
	}
}

func testListPages(t *testing.T, s objstore.Store) {
	var want []string
	for i := range 23 {
		k := fmt.Sprintf("p/%03d", i)
		if i%5 == 0 {
			k = fmt.Sprintf("p/%03d/sub", i)
		}
		want = append(want, k)
		put(t, s, k, "x", objstore.PutOptions{})
	}
	put(t, s, "q", "outside", objstore.PutOptions{})
	put(t, s, "o", "outside", objstore.PutOptions{})
	for _, limit := range []int{1, 2, 5, 22, 23, 24} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			l, err := s.List(bg, "p/", after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(l) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(l))
			}
			got = append(got, keys(l)...)
			if len(l) < limit {
				break
			}
			after = l[len(l)-1].Key
			if pages > 30 {
				t.Fatal("paging does not end")
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: pages joined = %v, want %v", limit, got, want)
		}
	}
}

func testCancelled(t *testing.T, s objstore.Store) {
	put(t, s, "k", "v", objstore.PutOptions{})
	ctx, cancel := context.WithCancel(bg)
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", op, err)
		}
	}
	_, _, err := s.Get(ctx, "k")
	check("Get", err)
	_, err = s.Head(ctx, "k")
	check("Head", err)
	_, err = s.Put(ctx, "new", []byte("x"), objstore.PutOptions{})
	check("Put", err)
	_, err = s.Put(ctx, "k", []byte("x"), objstore.CreateOnly())
	check("Put create-only", err)
	check("Delete", s.Delete(ctx, "k"))
	_, err = s.List(ctx, "", "", 0)
	check("List", err)
	if got, _ := get(t, s, "k"); got != "v" {
		t.Fatalf("object changed by cancelled calls: %q", got)
	}
}

// testChurn puts and deletes keys of one folder from many goroutines; on
// file stores that empties and recreates the folder under their feet.
// RunFolderChurn checks a property of backends that keep objects in real
// folders: racing puts and deletes of keys in one folder never fail, since
// removing a folder's last object must not break a put into it. It is not in
// Run because the S3 test server (versitygw's posix backend) has this very
// race itself ("Existing Object is a directory"); S3 proper has no folders.
func RunFolderChurn(t *testing.T, s objstore.Store) {
	var wg sync.WaitGroup
	errs := make(chan error, raceWriters)
	for w := range raceWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				key := fmt.Sprintf("churn/sub/%d-%d", w, i%3)
				opts := objstore.PutOptions{}
				if i%2 == 1 {
					opts = objstore.CreateOnly()
				}
				_, err := s.Put(bg, key, []byte("x"), opts)
				if err == nil {
					err = s.Delete(bg, key)
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if l, err := s.List(bg, "churn/", "", 0); err != nil || len(l) != 0 {
		t.Fatalf("after churn List = %v, %v; want empty", keys(l), err)
	}
}

const (
	raceKeys    = 50
	raceWriters = 8
	raceIncs    = 50
)

func testRaceCreateOnly(t *testing.T, s objstore.Store) {
	var wg sync.WaitGroup
	wins := make([][]int, raceWriters)
	errs := make(chan error, raceWriters)
	for w := range raceWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range raceKeys {
				key := fmt.Sprintf("race/%02d", k)
				_, err := s.Put(bg, key, []byte(strconv.Itoa(w)), objstore.CreateOnly())
				switch {
				case err == nil:
					wins[w] = append(wins[w], k)
				case !errors.Is(err, objstore.ErrPrecondition):
					errs <- fmt.Errorf("writer %d key %s: %w", w, key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	winner := map[int]int{}
	total := 0
	for w, ks := range wins {
		for _, k := range ks {
			if prev, dup := winner[k]; dup {
				t.Fatalf("key %d won by writers %d and %d", k, prev, w)
			}
			winner[k] = w
			total++
		}
	}
	if total != raceKeys {
		t.Fatalf("%d create-only winners for %d keys", total, raceKeys)
	}
	for k, w := range winner {
		if got, _ := get(t, s, fmt.Sprintf("race/%02d", k)); got != strconv.Itoa(w) {
			t.Fatalf("key %d holds %q, winner was %d", k, got, w)
		}
	}
}

func testRaceCounter(t *testing.T, s objstore.Store) {
	put(t, s, "counter", "0", objstore.CreateOnly())
	var wg sync.WaitGroup
	errs := make(chan error, raceWriters)
	for range raceWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range raceIncs {
				for {
					b, info, err := s.Get(bg, "counter")
					if err != nil {
						errs <- err
						return
					}
					n, err := strconv.Atoi(string(b))
					if err != nil {
						errs <- fmt.Errorf("counter holds %q: %w", b, err)
						return
					}
					_, err = s.Put(bg, "counter", []byte(strconv.Itoa(n+1)), objstore.IfMatch(info.ETag))
					if err == nil {
						break
					}
					if !errors.Is(err, objstore.ErrPrecondition) {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, _ := get(t, s, "counter"); got != strconv.Itoa(raceWriters*raceIncs) {
		t.Fatalf("counter = %s after %d If-Match increments", got, raceWriters*raceIncs)
	}
}
