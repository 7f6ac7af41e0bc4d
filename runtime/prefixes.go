package runtime

import (
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// The namespaces of the runtime's own objects. The writer lease's key is
// its default: a lease moved with lease.Options.Key is not known here.
// A component serving the runtime adds its own (the inbox of
// runtime/remote checks its prefixes against StoreNamespaces).
func runtimeNamespaces(queuePrefix, memoPrefix string) []objstore.Namespace {
	return []objstore.Namespace{
		{Owner: "the queue's kv store, queue.Options.Prefix", Prefix: queuePrefix},
		{Owner: "memo and replay records, Options.MemoPrefix", Prefix: memoPrefix},
		{Owner: "the writer lease object", Key: lease.DefaultKey},
		{Owner: "the writer lock file of a file store", Key: lease.DefaultLockFile},
	}
}
