package dsl

import (
	"strconv"
	"strings"
)

// before orders positions in the file.
func (p Pos) before(q Pos) bool {
	return p.Line < q.Line || p.Line == q.Line && p.Col < q.Col
}

// parallel builds a parallel step's branches, each a block of its own.
func (b *builder) parallel(st *Step, ps *parallelSpec) {
	st.Parallel = &Parallel{FailFast: true}
	if ps == nil { // parallel: null, a schema error
		return
	}
	if ps.Fail != nil && ps.Fail.str() == "all" {
		st.Parallel.FailFast = false
	}
	br := ps.Branches
	if br == nil || br.kind != kMap {
		return
	}
	for k, key := range br.keys {
		name, _ := key.scalar.(string)
		list := br.vals[k]
		var specs []*stepSpec
		if err := decodeStrict(list, &specs); err != nil {
			b.sink.errorf(list.pos, CodeSchemaInvalid, "", "%v", err)
			continue
		}
		blk := b.block(st.ID+"/"+name, list, specs, st, 0)
		st.Parallel.Branches = append(st.Parallel.Branches, Branch{Name: name, Block: blk})
	}
}

// mapStep builds a map step: its items, bounds and its block, whose steps
// read item and index.
func (b *builder) mapStep(st *Step, ms *mapSpec) {
	st.Map = &Map{Concurrency: 1}
	if ms == nil { // map: null, a schema error
		return
	}
	st.Map.Items = b.template(ms.Items, scBase, st.ord)
	if ms.Concurrency != nil {
		st.Map.Concurrency = max(int(asInt(ms.Concurrency)), 1)
	}
	if n := ms.ToleratedFailures; n != nil {
		if s, ok := n.scalar.(string); ok {
			v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
			if err != nil || !strings.HasSuffix(s, "%") || v < 0 || v > 100 {
				b.sink.errorf(n.pos, CodeMapTolerance, `write a count (5) or a percentage of the items ("10%")`, "tolerated_failures %q is neither a count nor a percentage from 0%% to 100%%", s)
			} else {
				st.Map.tolerated, st.Map.percent = v, true
			}
		} else {
			st.Map.tolerated = float64(max(asInt(n), 0))
		}
	}
	st.Map.Block = b.block(st.ID+"/item", b.nodes[st.ord].get("map").get("steps"), ms.Steps, st, scItem)
}
