package runtime

import (
	"net/url"
	"sort"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// labelPrefix is the index prefix of label k=v: the value is escaped, so
// one label's prefix is never a prefix of another's.
func labelPrefix(k, v string) string { return kvLabels + k + "=" + url.QueryEscape(v) + "/" }

// labelKey is the index entry of label k=v of runID; its value is the
// run's nonce, so an entry left by an earlier run of the same id is told
// apart.
func labelKey(k, v, runID string) string { return labelPrefix(k, v) + runID }

// labelWrites returns the index entries of a run's labels.
func labelWrites(labels map[string]string, runID, nonce string) []queue.KVWrite {
	out := make([]queue.KVWrite, 0, len(labels))
	for k, v := range labels {
		out = append(out, queue.KVWrite{Key: labelKey(k, v, runID), Value: []byte(nonce)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// labelCompareDeletes removes a run's label entries that still name its
// incarnation nonce (a later run of the same id keeps its own).
func labelCompareDeletes(labels map[string]string, runID, nonce string) []queue.KVWrite {
	return labelWrites(labels, runID, nonce)
}

// hasLabels reports whether have holds every label of want.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// pickLabel returns the label of want whose index ListRuns walks: the
// first by key, so a query walks the same index every time.
func pickLabel(want map[string]string) (string, string) {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[0], want[keys[0]]
}

// copyLabels returns a copy of labels, nil when empty.
func copyLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[k] = v
	}
	return out
}
