package dsl

import (
	"testing"

	"github.com/tqw-dsl/tqw/dsl/dslgen"
)

// BenchmarkParse1000 loads and validates a generated 1,000-step workflow
// (target: at most 50 ms per load; figures in docs/BENCHMARKS.md#dsl).
func BenchmarkParse1000(b *testing.B) {
	src := dslgen.Workflow(1000)
	b.SetBytes(int64(len(src)))
	cpu0 := processCPU()
	for b.Loop() {
		if _, _, err := Parse("gen.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time per load, next to wall time, which other processes on a
	// shared machine inflate.
	if cpu0 >= 0 {
		b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	}
}

func TestGeneratedWorkflowsAreValid(t *testing.T) {
	for _, n := range []int{1, 2, 7, 100} {
		w, diags, err := Parse("gen.yaml", dslgen.Workflow(n))
		if err != nil || len(diags) != 0 || len(w.Steps) != n {
			t.Fatalf("n=%d: %v\n%s", n, err, diags)
		}
	}
}
