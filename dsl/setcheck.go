package dsl

import (
	"fmt"
	"slices"
)

// checkSetReads warns, for every set (of a step or a catch rule), about
// each value that reads, as a literal vars.<name> or vars["name"], a
// variable another key of the same set assigns. A value reading its own
// variable (i: "${ vars.i - 1 }") is not reported: it can only mean the
// old value.
func (b *builder) checkSetReads() {
	for _, st := range b.w.all {
		if st == nil {
			continue
		}
		b.checkSet(st.ID, "set", st.Set)
		for i := range st.Catch {
			b.checkSet(st.ID, fmt.Sprintf("catch[%d].set", i), st.Catch[i].Set)
		}
	}
}

func (b *builder) checkSet(step, where string, set []Assignment) {
	if len(set) < 2 {
		return
	}
	names := make([]string, len(set))
	for i, a := range set {
		names[i] = a.Name
	}
	for _, a := range set {
		for _, e := range a.Value.Exprs() {
			if e == nil {
				continue
			}
			var warned []string
			for _, r := range b.exprs.compile(e.Source).refs {
				if r.root != "vars" || r.name == a.Name || !slices.Contains(names, r.name) || slices.Contains(warned, r.name) {
					continue
				}
				warned = append(warned, r.name)
				b.sink.warnf(e.Pos, CodeSetReadsAssigned,
					fmt.Sprintf("to read the new %s, set %s in a later step: sequencing is two steps", r.name, a.Name),
					"%s of step %q: %s reads vars.%s, which this same set assigns; every value of a set reads the variables as they were before it, so %s sees the old value of %s",
					where, step, a.Name, r.name, a.Name, r.name)
			}
		}
	}
}
