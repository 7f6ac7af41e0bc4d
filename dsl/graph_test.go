package dsl

import (
	"math/rand/v2"
	"testing"
)

func TestStepRefsInLoops(t *testing.T) {
	src := `tqw: v1
name: loop
steps:
  - id: a
    set: {x: "${ steps.c.output }", y: "${ steps.d.output }"}
  - id: b
    action: sleep
    with: {duration: 1s}
  - id: c
    switch:
      - when: vars.x == nil
        next: a
    next: d
  - id: d
    succeed: 1
`
	_, diags, err := Parse("loop.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(diags) != 1 || diags[0].Code != CodeExprNotRun || diags[0].Line != 5 || diags[0].Message != `step "a" reads steps.d, which cannot have run yet` {
		t.Fatalf("want one warning about steps.d, got:\n%s", diags)
	}
}

// TestClosureMatchesSearch compares the bitset closure with a plain
// depth-first search on random graphs with cycles and computed targets.
func TestClosureMatchesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		n := 1 + rng.IntN(150)
		g := &stepGraph{succ: make([][]int, n), anywhere: make([]bool, n)}
		for i := range n {
			for range rng.IntN(3) {
				g.succ[i] = append(g.succ[i], rng.IntN(n))
			}
			g.anywhere[i] = rng.IntN(60) == 0
		}
		c := newClosure(g)
		for from := range n {
			seen := make([]bool, n)
			stack := []int{from}
			for len(stack) > 0 {
				v := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				next := g.succ[v]
				if g.anywhere[v] {
					next = make([]int, n)
					for i := range next {
						next[i] = i
					}
				}
				for _, w := range next {
					if !seen[w] {
						seen[w] = true
						stack = append(stack, w)
					}
				}
			}
			for to := range n {
				if c.canFollow(from, to) != seen[to] {
					t.Fatalf("round %d: canFollow(%d, %d) = %v; search says %v", round, from, to, !seen[to], seen[to])
				}
			}
		}
	}
}
