package interpreter

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPlain pins what plain makes of every kind of value expressions and
// actions produce.
func TestPlain(t *testing.T) {
	type label string
	type inner struct {
		N int64 `json:"n"`
	}
	type rec struct {
		Name  string  `json:"name"`
		Inner inner   `json:"inner"`
		F     float64 `json:"f"`
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 800, time.UTC)
	for _, c := range []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"bool", true, true},
		{"string", "s", "s"},
		{"int64", int64(-3), int64(-3)},
		{"int", 7, int64(7)},
		{"int8", int8(-8), int64(-8)},
		{"uint32", uint32(9), int64(9)},
		{"uint in range", uint(10), int64(10)},
		{"uint64 past int64", uint64(math.MaxUint64), float64(math.MaxUint64)},
		{"float32", float32(0.5), 0.5},
		{"json.Number int", json.Number("12"), int64(12)},
		{"json.Number float", json.Number("1.5"), 1.5},
		{"time", at, "2026-03-04T05:06:07.0000008Z"},
		{"duration", 90 * time.Minute, "1h30m0s"},
		{"bytes", []byte("hi"), "hi"},
		{"named string", label("x"), "x"},
		{"[]int", []int{1, 2}, []any{int64(1), int64(2)}},
		{"array", [2]string{"a", "b"}, []any{"a", "b"}},
		{"[]string", []string{"a"}, []any{"a"}},
		{"map[string]int", map[string]int{"a": 1}, map[string]any{"a": int64(1)}},
		{"map[string]string", map[string]string{"a": "b"}, map[string]any{"a": "b"}},
		{"nested", map[string]any{"l": []any{at, map[string]any{"d": time.Second}}, "t": []time.Duration{time.Minute}},
			map[string]any{"l": []any{"2026-03-04T05:06:07.0000008Z", map[string]any{"d": "1s"}}, "t": []any{"1m0s"}}},
		{"struct", rec{Name: "r", Inner: inner{N: 1 << 60}, F: 2.5}, map[string]any{"name": "r", "inner": map[string]any{"n": int64(1 << 60)}, "f": 2.5}},
		{"map[int]string", map[int]string{1: "a"}, map[string]any{"1": "a"}},
		{"nil pointer", (*rec)(nil), nil},
	} {
		got, err := plain(c.in)
		if err != nil {
			t.Errorf("%s: plain(%#v): %v", c.name, c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: plain(%#v) = %#v, want %#v", c.name, c.in, got, c.want)
		}
	}
}

func TestPlainRejects(t *testing.T) {
	deep := any("leaf")
	for range 10002 {
		deep = []any{deep}
	}
	for _, c := range []struct {
		name string
		in   any
		want string
	}{
		{"NaN", math.NaN(), "not valid JSON"},
		{"infinite float32", float32(math.Inf(1)), "not valid JSON"},
		{"bad json.Number", json.Number("x"), `number "x"`},
		{"channel", make(chan int), "cannot be stored"},
		{"NaN in a map", map[string]any{"k": math.Inf(-1)}, "k: number"},
		{"NaN in a list", []any{1, math.NaN()}, "not valid JSON"},
		{"channel in a slice", []chan int{make(chan int)}, "cannot be stored"},
		{"too deep", deep, "nested too deeply"},
	} {
		_, err := plain(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: plain = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
