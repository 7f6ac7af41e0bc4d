// Package invariants turns the invariants the storage stack and the
// runtime document into checks, as Pebble's internal/invariants does.
// They are compiled in with the `invariants` build tag or under the race
// detector (`make test` runs `go test -race -tags invariants`) and
// compiled out of release builds, where Enabled is a false constant and
// every check is dead code. A failed check panics with the invariant's
// statement: it is a bug in tqw, never a user error.
//
// Cost: none in release builds; in checked builds a few comparisons per
// commit, claim and step, and one map scan per snapshot trim.
package invariants
