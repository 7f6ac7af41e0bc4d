package shell_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/shell"
)

// benchSupervisorEnv names a binary to start supervisors from (it must
// link this package, as tqw-dsl does) instead of this test binary.
const benchSupervisorEnv = "TQW_SHELL_BENCH_SUPERVISOR"

// BenchmarkStep runs the smallest shell step, argv ["true"], started
// directly and under a supervisor; the difference of the two medians is
// what the supervisor costs per step. The metric p50-ms/step is the median
// wall time of one step, start to result.
func BenchmarkStep(b *testing.B) {
	for _, mode := range []string{"direct", "supervised"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "direct" {
				defer shell.RunUnsupervisedForTest()()
			} else if exe := os.Getenv(benchSupervisorEnv); exe != "" {
				defer shell.SupervisorFromForTest(exe)()
			}
			a := shell.New(shell.Options{})
			args := map[string]any{"command": []any{"true"}}
			var times []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := a.Execute(b.Context(), call(args)); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2])/float64(time.Millisecond), "p50-ms/step")
		})
	}
}
