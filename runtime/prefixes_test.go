package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

func TestCheckNamespaces(t *testing.T) {
	p := func(owner, prefix string) Namespace { return Namespace{Owner: owner, Prefix: prefix} }
	k := func(owner, key string) Namespace { return Namespace{Owner: owner, Key: key} }
	for _, tc := range []struct {
		name   string
		spaces []Namespace
		want   error
		// names: both namespaces the error must name.
		names []string
	}{
		{name: "disjoint", spaces: []Namespace{p("a", "queue"), p("b", "inbox"), p("c", "inbox-answers"), k("d", "writer-lease"), p("e", "tqw/defs"), p("f", "tqw/outputs")}},
		{name: "a name that only starts like a prefix", spaces: []Namespace{p("a", "inbox"), p("b", "inboxes"), k("c", "inbox.lock")}},
		{name: "equal prefixes", spaces: []Namespace{p("a", "queue"), p("b", "queue")}, want: ErrNamespaceOverlap, names: []string{`"queue/" (a)`, `"queue/" (b)`}},
		{name: "a prefix inside another", spaces: []Namespace{p("a", "x"), p("memo", "queue/memo"), p("kv", "queue")}, want: ErrNamespaceOverlap, names: []string{`"queue/memo/" (memo)`, `"queue/" (kv)`}},
		{name: "a trailing slash changes nothing", spaces: []Namespace{p("a", "queue/"), p("b", "queue")}, want: ErrNamespaceOverlap},
		{name: "case-insensitive file systems", spaces: []Namespace{p("a", "Inbox"), p("b", "inbox")}, want: ErrNamespaceOverlap},
		{name: "a key inside a prefix", spaces: []Namespace{p("memo", "tqw"), k("lease", "tqw/lease")}, want: ErrNamespaceOverlap, names: []string{`"tqw/" (memo)`, `"tqw/lease" (lease)`}},
		{name: "a key named like a prefix", spaces: []Namespace{k("lease", "writer-lease"), p("memo", "writer-lease")}, want: ErrNamespaceOverlap},
		{name: "equal keys", spaces: []Namespace{k("a", "lock"), k("b", "lock")}, want: ErrNamespaceOverlap},
		{name: "neither prefix nor key", spaces: []Namespace{{Owner: "a"}}, want: errors.New("set exactly one")},
		{name: "both prefix and key", spaces: []Namespace{{Owner: "a", Prefix: "x", Key: "y"}}, want: errors.New("set exactly one")},
		{name: "invalid key", spaces: []Namespace{p("a", "/abs")}, want: objstore.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckNamespaces(tc.spaces...)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("CheckNamespaces = %v; want nil", err)
			case tc.want == nil:
			case err == nil:
				t.Fatalf("CheckNamespaces = nil; want %v", tc.want)
			case errors.Is(tc.want, ErrNamespaceOverlap) || errors.Is(tc.want, objstore.ErrInvalidKey):
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
// the store's other components (a Runtime's are Runtime.StoreNamespaces)
// before it writes into the same store.
func ExampleCheckNamespaces() {
	err := CheckNamespaces(
		Namespace{Owner: "the queue's kv store, queue.Options.Prefix", Prefix: "queue"},
		Namespace{Owner: "the writer lease object", Key: "writer-lease"},
		Namespace{Owner: "uploads, Server.UploadPrefix", Prefix: "queue/uploads"},
	)
	fmt.Println(errors.Is(err, ErrNamespaceOverlap))
	fmt.Println(err)
	// Output:
	// true
	// runtime: object-key namespaces overlap: "queue/" (the queue's kv store, queue.Options.Prefix) and "queue/uploads/" (uploads, Server.UploadPrefix) share keys; give each its own prefix
}
