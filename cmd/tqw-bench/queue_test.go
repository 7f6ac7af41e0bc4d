package main

import "testing"

func TestQueueBenchJSONLines(t *testing.T) {
	dir := t.TempDir()
	lines := runLines(t, "queue", "--store", "mem://queuebenchtest,file://"+dir, "--concurrency", "2",
		"--ops", "60", "--deep", "300", "--reopen-pending", "50", "--reopen-done", "120", "--payload", "16")
	seen := map[string]int{}
	for _, r := range lines {
		bench, _ := r["bench"].(string)
		seen[bench]++
		if r["seconds"].(float64) <= 0 || r["p99_ms"].(float64) < r["p50_ms"].(float64) {
			t.Fatalf("bad result %v", r)
		}
		switch bench {
		case "queue-e2e":
			if r["ops"].(float64) < 60 || r["puts_per_state_change"].(float64) <= 0 {
				t.Fatalf("e2e result %v", r)
			}
		case "queue-claim-deep":
			if r["ops"].(float64) < 60 {
				t.Fatalf("deep result %v", r)
			}
		case "queue-reopen":
			if r["done"].(float64) != 120 || r["pending"].(float64) != 50 {
				t.Fatalf("reopen result %v", r)
			}
		default:
			t.Fatalf("unexpected bench %q", bench)
		}
	}
	for _, b := range []string{"queue-e2e", "queue-claim-deep", "queue-reopen"} {
		if seen[b] != 2 {
			t.Fatalf("%s: %d results, want one per store (2): %v", b, seen[b], seen)
		}
	}
}
