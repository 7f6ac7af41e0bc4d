package objstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

func TestCheckNamespaces(t *testing.T) {
	p := func(owner, prefix string) objstore.Namespace { return objstore.Namespace{Owner: owner, Prefix: prefix} }
	k := func(owner, key string) objstore.Namespace { return objstore.Namespace{Owner: owner, Key: key} }
	for _, tc := range []struct {
		name   string
		spaces []objstore.Namespace
		want   error
		// names: both namespaces the error must name.
		names []string
	}{
		{name: "disjoint", spaces: []objstore.Namespace{p("a", "queue"), p("b", "inbox"), p("c", "inbox-answers"), k("d", "writer-lease"), p("e", "tqw/defs"), p("f", "tqw/outputs")}},
		{name: "a name that only starts like a prefix", spaces: []objstore.Namespace{p("a", "inbox"), p("b", "inboxes"), k("c", "inbox.lock")}},
		{name: "equal prefixes", spaces: []objstore.Namespace{p("a", "queue"), p("b", "queue")}, want: objstore.ErrNamespaceOverlap, names: []string{`"queue/" (a)`, `"queue/" (b)`}},
		{name: "a prefix inside another", spaces: []objstore.Namespace{p("a", "x"), p("memo", "queue/memo"), p("kv", "queue")}, want: objstore.ErrNamespaceOverlap, names: []string{`"queue/memo/" (memo)`, `"queue/" (kv)`}},
		{name: "a trailing slash changes nothing", spaces: []objstore.Namespace{p("a", "queue/"), p("b", "queue")}, want: objstore.ErrNamespaceOverlap},
		{name: "case-insensitive file systems", spaces: []objstore.Namespace{p("a", "Inbox"), p("b", "inbox")}, want: objstore.ErrNamespaceOverlap},
		{name: "a key inside a prefix", spaces: []objstore.Namespace{p("memo", "tqw"), k("lease", "tqw/lease")}, want: objstore.ErrNamespaceOverlap, names: []string{`"tqw/" (memo)`, `"tqw/lease" (lease)`}},
		{name: "a key named like a prefix", spaces: []objstore.Namespace{k("lease", "writer-lease"), p("memo", "writer-lease")}, want: objstore.ErrNamespaceOverlap},
		{name: "equal keys", spaces: []objstore.Namespace{k("a", "lock"), k("b", "lock")}, want: objstore.ErrNamespaceOverlap},
		{name: "neither prefix nor key", spaces: []objstore.Namespace{{Owner: "a"}}, want: errors.New("set exactly one")},
		{name: "both prefix and key", spaces: []objstore.Namespace{{Owner: "a", Prefix: "x", Key: "y"}}, want: errors.New("set exactly one")},
		{name: "invalid key", spaces: []objstore.Namespace{p("a", "/abs")}, want: objstore.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := objstore.CheckNamespaces(tc.spaces...)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("CheckNamespaces = %v; want nil", err)
			case tc.want == nil:
			case err == nil:
				t.Fatalf("CheckNamespaces = nil; want %v", tc.want)
			case errors.Is(tc.want, objstore.ErrNamespaceOverlap) || errors.Is(tc.want, objstore.ErrInvalidKey):
				if !errors.Is(err, tc.want) {
					t.Fatalf("CheckNamespaces = %v; want %v", err, tc.want)
				}
			case !strings.Contains(err.Error(), tc.want.Error()):
				t.Fatalf("CheckNamespaces = %v; want it to say %q", err, tc.want)
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("error %q does not name %s", err, n)
				}
			}
		})
	}
}

// ExampleCheckNamespaces checks a component's objects against those of
// the store's other components (a runtime.Runtime's are its StoreNamespaces)
// before it writes into the same store.
func ExampleCheckNamespaces() {
	err := objstore.CheckNamespaces(
		objstore.Namespace{Owner: "the queue's kv store, queue.Options.Prefix", Prefix: "queue"},
		objstore.Namespace{Owner: "the writer lease object", Key: "writer-lease"},
		objstore.Namespace{Owner: "uploads, Server.UploadPrefix", Prefix: "queue/uploads"},
	)
	fmt.Println(errors.Is(err, objstore.ErrNamespaceOverlap))
	fmt.Println(err)
	// Output:
	// true
	// objstore: object-key namespaces overlap: "queue/" (the queue's kv store, queue.Options.Prefix) and "queue/uploads/" (uploads, Server.UploadPrefix) share keys; give each its own prefix
}
