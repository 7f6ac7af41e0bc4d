package interpreter

import (
	"encoding/json"
	"reflect"
)

// Difference is one place where two runs' histories part: a step one run
// took and the other did not (Kind "only_a", "only_b"), or one both took
// with a different outcome or output ("outcome", "output"). Index is
// the place of the step among the finished steps of run A (of run B for
// "only_b"), from 0.
type Difference struct {
	Kind  string         `json:"kind"`
	Index int            `json:"index"`
	Step  string         `json:"step"`
	A     *HistoryRecord `json:"a,omitempty"`
	B     *HistoryRecord `json:"b,omitempty"`
}

// maxDiffAlign bounds the finished steps DiffHistories aligns by their
// longest common sequence (quadratic in time and memory); past it the two
// are compared place by place.
const maxDiffAlign = 4000

// DiffHistories compares the histories of two runs (History), step by
// step: the steps each finished (retried attempts and waits aside),
// aligned by their longest common sequence of step ids, so a step one
// run inserted or skipped shows as one difference, not a shift of all
// that follows. The first difference is where the runs took a different
// path or produced a different output; every later one follows in order.
// Times and attempt counts are not compared.
func DiffHistories(a, b []HistoryRecord) []Difference {
	fa, fb := finished(a), finished(b)
	var out []Difference
	same := func(i, j int) {
		x, y := fa[i], fb[j]
		switch {
		case x.Outcome != y.Outcome || errType(x) != errType(y) || x.Next != y.Next:
			out = append(out, Difference{Kind: "outcome", Index: i, Step: x.Step, A: &fa[i], B: &fb[j]})
		case !sameValue(x.Output, y.Output):
			out = append(out, Difference{Kind: "output", Index: i, Step: x.Step, A: &fa[i], B: &fb[j]})
		}
	}
	onlyA := func(i int) { out = append(out, Difference{Kind: "only_a", Index: i, Step: fa[i].Step, A: &fa[i]}) }
	onlyB := func(j int) { out = append(out, Difference{Kind: "only_b", Index: j, Step: fb[j].Step, B: &fb[j]}) }
	if len(fa) > maxDiffAlign || len(fb) > maxDiffAlign {
		for i := 0; i < max(len(fa), len(fb)); i++ {
			switch {
			case i >= len(fb):
				onlyA(i)
			case i >= len(fa):
				onlyB(i)
			case fa[i].Step != fb[i].Step:
				onlyA(i)
				onlyB(i)
			default:
				same(i, i)
			}
		}
		return out
	}
	// lcs[i][j]: the longest common sequence of fa[i:] and fb[j:].
	lcs := make([][]int32, len(fa)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(fb)+1)
	}
	for i := len(fa) - 1; i >= 0; i-- {
		for j := len(fb) - 1; j >= 0; j-- {
			if fa[i].Step == fb[j].Step {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(fa) || j < len(fb) {
		switch {
		case i < len(fa) && j < len(fb) && fa[i].Step == fb[j].Step:
			same(i, j)
			i, j = i+1, j+1
		case j >= len(fb) || i < len(fa) && lcs[i+1][j] >= lcs[i][j+1]:
			onlyA(i)
			i++
		default:
			onlyB(j)
			j++
		}
	}
	return out
}

// finished returns the records of steps that ended (not a retried
// attempt, a wait or a signal set aside).
func finished(recs []HistoryRecord) []HistoryRecord {
	var out []HistoryRecord
	for _, h := range recs {
		switch h.Outcome {
		case OutcomeRetry, OutcomeWaiting, OutcomeSignalRejected:
			continue
		}
		out = append(out, h)
	}
	return out
}

func errType(h HistoryRecord) string {
	if h.Error == nil {
		return ""
	}
	return h.Error.Type
}

// sameValue compares two outputs as JSON, so integer and float forms of
// one number, or two encodings of one map, are equal.
func sameValue(a, b any) bool {
	ja, ea := json.Marshal(a)
	jb, eb := json.Marshal(b)
	if ea != nil || eb != nil {
		return reflect.DeepEqual(a, b)
	}
	var va, vb any
	if json.Unmarshal(ja, &va) != nil || json.Unmarshal(jb, &vb) != nil {
		return string(ja) == string(jb)
	}
	return reflect.DeepEqual(va, vb)
}
