package interpreter

import (
	"errors"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// View reads what the interpreter keeps in a store without running
// anything: the workflow definitions runs are pinned to (Definition),
// where an active run stands (Position), and the step waiting on a
// signal (Waiting, CheckSignal). A process that reads a store another
// process writes uses a View; an Interpreter is one too. Safe for
// concurrent use.
type View struct {
	store   objstore.Store
	dslOpts dsl.Options

	// defs caches parsed definitions by hash, bounded (defCache): a
	// server given unique inline workflows does not grow without end.
	defMu sync.Mutex
	defs  *defCache
	// pins are the definitions known stored: Submit pins each once.
	pins pinSet
}

// NewView returns a view of the definitions in store, parsed knowing the
// registry's actions. Cost: nothing until a method reads the store.
func NewView(store objstore.Store, acts *actions.Registry) (*View, error) {
	if store == nil || acts == nil {
		return nil, errors.New("interpreter: NewView needs a store and an action registry")
	}
	return newView(store, LoadOptions(acts, dsl.Options{})), nil
}

func newView(store objstore.Store, load dsl.Options) *View {
	return &View{store: store, dslOpts: load, defs: newDefCache(DefinitionCacheSize, DefinitionCacheBytes)}
}

// DefinitionCacheSize and DefinitionCacheBytes bound the parsed definitions
// a View (an Interpreter too) keeps in memory: at most this many, whose
// YAML sources add up to at most this many bytes, least recently used
// dropped first. A dropped definition costs one GET and a parse when a
// step needs it again.
const (
	DefinitionCacheSize  = 1024
	DefinitionCacheBytes = 64 << 20
)

// defCache is an LRU of definitions bounded in count and in source bytes;
// View.defMu guards it.
type defCache struct {
	lru      *lru.Cache[string, *definition]
	bytes    int
	maxBytes int
}

func newDefCache(size, maxBytes int) *defCache {
	c := &defCache{maxBytes: maxBytes}
	l, err := lru.NewWithEvict(size, func(_ string, d *definition) { c.bytes -= len(d.wf.Source) })
	if err != nil {
		panic(err) // size is a positive constant
	}
	c.lru = l
	return c
}

func (c *defCache) get(hash string) *definition {
	d, _ := c.lru.Get(hash)
	return d
}

// add keeps d, then drops the least recently used until within the byte
// bound (d itself stays, the one entry a step is about to use).
func (c *defCache) add(hash string, d *definition) {
	c.bytes += len(d.wf.Source)
	c.lru.Add(hash, d)
	for c.bytes > c.maxBytes && c.lru.Len() > 1 {
		c.lru.RemoveOldest()
	}
}

func (c *defCache) len() int { return c.lru.Len() }
