package objstore

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNamespaceOverlap reports two components configured to use the same
// object keys of one store: one would read, overwrite or delete the
// other's objects.
var ErrNamespaceOverlap = errors.New("objstore: object-key namespaces overlap")

// Namespace is the share of an object store's keys one component uses:
// every key under Prefix + "/", or the single object Key. Exactly one of
// Prefix and Key is set.
type Namespace struct {
	// Owner names the component and the setting that moves it, for the
	// error that reports an overlap ("memo and replay records,
	// Options.MemoPrefix").
	Owner  string
	Prefix string
	Key    string
}

// path is the key or the prefix, without a trailing '/'.
func (n Namespace) path() string {
	if n.Key != "" {
		return n.Key
	}
	return strings.TrimSuffix(n.Prefix, "/")
}

// String names the keys and their owner: "inbox/" (inbox commands,
// InboxOptions.Prefix).
func (n Namespace) String() string {
	if n.Key != "" {
		return fmt.Sprintf("%q (%s)", n.Key, n.Owner)
	}
	return fmt.Sprintf("%q (%s)", n.path()+"/", n.Owner)
}

// CheckNamespaces returns an error wrapping ErrNamespaceOverlap, naming
// both, for the first two namespaces that can share a key, and an error
// wrapping ErrInvalidKey for a prefix or key that is not a valid object
// key. Two namespaces overlap when their paths are equal or one lies
// under the other ("queue" and "queue/memo"); an object and a prefix of
// the same name overlap too, as a file store cannot hold a file and a
// folder of one name. Paths compare case-insensitively, as a file store
// on a case-insensitive file system (macOS, Windows) keeps "Inbox" and
// "inbox" in one folder. It makes no request.
func CheckNamespaces(spaces ...Namespace) error {
	for i, a := range spaces {
		if (a.Prefix == "") == (a.Key == "") {
			return fmt.Errorf("objstore: namespace of %s: set exactly one of Prefix (%q) and Key (%q)", a.Owner, a.Prefix, a.Key)
		}
		if err := ValidateKey(a.path()); err != nil {
			return fmt.Errorf("objstore: namespace of %s: %w", a.Owner, err)
		}
		for _, b := range spaces[:i] {
			if within(a.path(), b.path()) || within(b.path(), a.path()) {
				return fmt.Errorf("%w: %s and %s share keys; give each its own prefix", ErrNamespaceOverlap, b, a)
			}
		}
	}
	return nil
}

// within reports whether path p is base or lies under it.
func within(p, base string) bool {
	p, base = strings.ToLower(p), strings.ToLower(base)
	return p == base || strings.HasPrefix(p, base+"/")
}
