package inspect

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// copyOf is a fake copy of a run: the tier it is in, its state and label.
type copyOf struct {
	tier  int
	state int
	label string
}

// fakeCursor walks ids of a tier from past after, in order.
type fakeCursor struct {
	ids    []string
	copies map[string]copyOf
	pos    int
}

func (c *fakeCursor) Peek(context.Context) (string, copyOf, bool, error) {
	if c.pos == len(c.ids) {
		return "", copyOf{}, false, nil
	}
	return c.ids[c.pos], c.copies[c.ids[c.pos]], true, nil
}

func (c *fakeCursor) Next() { c.pos++ }

// filter is a listing's selection of copies.
type filter struct {
	states map[int]bool // nil: every state
	label  string       // "": every label
}

func (f filter) keeps(c copyOf) bool {
	return (f.states == nil || f.states[c.state]) && (f.label == "" || c.label == f.label)
}

// world is a random set of tiers, newest first, each a map of id to copy.
type world []map[string]copyOf

func randomWorld(r *rand.Rand) world {
	w := make(world, 2+r.IntN(3))
	for i := range w {
		w[i] = map[string]copyOf{}
		for id := range 14 {
			if r.IntN(3) == 0 {
				w[i][fmt.Sprintf("id-%02d", id)] = copyOf{tier: i, state: r.IntN(4), label: []string{"", "x", "y"}[r.IntN(3)]}
			}
		}
	}
	return w
}

// newest is the brute-force reading: every id's copy in the first tier
// holding it.
func (w world) newest() map[string]copyOf {
	out := map[string]copyOf{}
	for i := len(w) - 1; i >= 0; i-- {
		maps.Copy(out, w[i])
	}
	return out
}

// tiers builds Merge tiers over w for f: tier i walked whole, walked
// through a cursor that leaves out copies f rejects, or (when f rejects
// all its copies) not walked, as mode picks.
func (w world) tiers(f filter, after string, desc bool, mode func(i int) int) []Tier[copyOf] {
	var out []Tier[copyOf]
	for i, held := range w {
		probe := func(_ context.Context, id string) (copyOf, bool, error) {
			c, ok := held[id]
			return c, ok, nil
		}
		m := mode(i)
		if m == 2 {
			for _, c := range held {
				if f.keeps(c) {
					m = 1
				}
			}
		}
		if m == 2 {
			out = append(out, Tier[copyOf]{Probe: probe})
			continue
		}
		var ids []string
		for id, c := range held {
			past := after == "" || (desc && id < after) || (!desc && id > after)
			if past && (m == 0 || f.keeps(c)) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		if desc {
			slices.Reverse(ids)
		}
		out = append(out, Tier[copyOf]{Cursor: &fakeCursor{ids: ids, copies: held}, Partial: m == 1, Probe: probe})
	}
	return out
}

// Merge, then the filter, lists exactly what the brute-force reading
// lists: for every filter, order, cursor and way of walking each tier,
// an id is listed by its newest copy or not at all.
func TestMergeListsTheNewestCopyOfEachID(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for range 300 {
		w := randomWorld(r)
		newest := w.newest()
		ids := slices.Sorted(maps.Keys(newest))
		modes := make([]int, len(w))
		for i := range modes {
			modes[i] = r.IntN(3)
		}
		for mask := range 1 << 4 {
			for _, label := range []string{"", "x"} {
				f := filter{label: label}
				if mask != 0 {
					f.states = map[int]bool{}
					for s := range 4 {
						if mask&(1<<s) != 0 {
							f.states[s] = true
						}
					}
				}
				for _, desc := range []bool{false, true} {
					var want []string
					for _, id := range ids {
						if f.keeps(newest[id]) {
							want = append(want, id)
						}
					}
					if desc {
						slices.Reverse(want)
					}
					for _, page := range []int{1, 3, 100} {
						var got []string
						after := ""
						for {
							m := &Merge[copyOf]{Tiers: w.tiers(f, after, desc, func(i int) int { return modes[i] }), Desc: desc}
							n := 0
							for n < page {
								res, ok, err := m.Next(ctx)
								if err != nil {
									t.Fatal(err)
								}
								if !ok {
									break
								}
								if res.Copy != newest[res.ID] || res.Tier != res.Copy.tier {
									t.Fatalf("Merge gave %s from tier %d, copy %+v; its newest is %+v", res.ID, res.Tier, res.Copy, newest[res.ID])
								}
								if f.keeps(res.Copy) {
									got = append(got, res.ID)
									n++
								}
							}
							if n < page {
								break
							}
							after = got[len(got)-1]
						}
						if !slices.Equal(got, want) {
							t.Fatalf("world %v, modes %v, filter %+v, desc %v, page %d: listed %v, want %v", w, modes, f, desc, page, got, want)
						}
					}
				}
			}
		}
	}
}

// A tally of the oldest tier plus the ids Merge yields, less the copies
// they hide, counts every id once, by its newest copy.
func TestMergeCountsWithATally(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for range 500 {
		w := randomWorld(r)
		want := map[int]int{}
		for _, c := range w.newest() {
			want[c.state]++
		}
		last := len(w) - 1
		got := map[int]int{}
		for _, c := range w[last] {
			got[c.state]++
		}
		tiers := w.tiers(filter{}, "", false, func(int) int { return 0 })
		tiers[last].Cursor, tiers[last].Counted = nil, true
		m := &Merge[copyOf]{Tiers: tiers}
		for {
			res, ok, err := m.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			got[res.Copy.state]++
			for _, h := range res.Hidden {
				got[h.state]--
			}
		}
		maps.DeleteFunc(got, func(_ int, n int) bool { return n == 0 })
		if !maps.Equal(got, want) {
			t.Fatalf("world %v: counted %v, want %v", w, got, want)
		}
	}
}

// Lookup returns the copy of the first tier holding the id.
func TestLookupReadsTheNewestTierFirst(t *testing.T) {
	w := world{{"a": {tier: 0}}, {"a": {tier: 1}, "b": {tier: 1}}}
	tiers := w.tiers(filter{}, "", false, func(int) int { return 0 })
	for id, want := range map[string]int{"a": 0, "b": 1} {
		c, tier, ok, err := Lookup(context.Background(), tiers, id)
		if err != nil || !ok || tier != want || c.tier != want {
			t.Errorf("Lookup(%s) = %+v, %d, %v, %v; want tier %d", id, c, tier, ok, err, want)
		}
	}
	if _, _, ok, err := Lookup(context.Background(), tiers, "c"); ok || err != nil {
		t.Errorf("Lookup(c) = %v, %v; want not found", ok, err)
	}
}

// A tier Merge or Lookup must read by id but cannot is an error, not a
// listing that silently misses its copies.
func TestATierWithoutAPointReadIsAnError(t *testing.T) {
	ctx := context.Background()
	older := &fakeCursor{ids: []string{"a"}, copies: map[string]copyOf{"a": {tier: 1}}}
	m := &Merge[copyOf]{Tiers: []Tier[copyOf]{{}, {Cursor: older}}}
	if _, _, err := m.Next(ctx); err == nil {
		t.Error("Merge.Next with a tier neither walked nor read by id: no error")
	}
	if _, _, _, err := Lookup(ctx, []Tier[copyOf]{{Cursor: older}}, "a"); err == nil {
		t.Error("Lookup in a tier without a point read: no error")
	}
}
