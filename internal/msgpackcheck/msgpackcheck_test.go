package msgpackcheck

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/allocbound"
)

type sample struct {
	S   string            `msgpack:"s"`
	B   []byte            `msgpack:"b"`
	I   int64             `msgpack:"i"`
	U   uint64            `msgpack:"u"`
	F   float64           `msgpack:"f"`
	F32 float32           `msgpack:"g"`
	T   time.Time         `msgpack:"t"`
	M   map[string]string `msgpack:"m"`
	L   []any             `msgpack:"l"`
	N   *int              `msgpack:"n"`
	Ok  bool              `msgpack:"ok"`
}

// validValues are encodings of every type byte family the library writes.
func validValues(t testing.TB) [][]byte {
	long := strings.Repeat("x", 70_000)
	vals := []any{
		nil, true, false, 0, 127, -1, -32, -33, 200, -200, 70_000, -70_000, int64(math.MaxInt64), int64(math.MinInt64),
		uint64(math.MaxUint64), 1.5, float32(2.5), "", "abc", strings.Repeat("y", 40), strings.Repeat("z", 300), long,
		[]byte{}, []byte("bin"), make([]byte, 300), make([]byte, 70_000), []int{}, []int{1, 2, 3}, make([]int, 20),
		make([]int, 70_000), map[string]int{}, map[string]int{"a": 1}, time.Unix(1, 5), time.Unix(1<<40, 0),
		&sample{S: "s", B: []byte("b"), I: -5, U: 9, F: 1.25, T: time.Unix(0, 1), M: map[string]string{"k": "v"},
			L: []any{1, "x", []any{map[string]any{"deep": []any{nil}}}}, Ok: true},
	}
	big := map[string]int{}
	for i := range 20 {
		big[strings.Repeat("k", i+1)] = i
	}
	vals = append(vals, big)
	var out [][]byte
	for _, v := range vals {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestCheckAcceptsWhatTheLibraryWrites(t *testing.T) {
	for _, b := range validValues(t) {
		if err := Check(b, Options{Timestamps: true}); err != nil {
			t.Errorf("Check(% x...) = %v", b[:min(len(b), 16)], err)
		}
	}
}

func TestCheckRejects(t *testing.T) {
	nest := func(n int) []byte { return append(bytes.Repeat([]byte{0x91}, n), 0xc0) }
	for name, c := range map[string]struct {
		in    []byte
		depth int
		want  string
	}{
		"empty":                 {nil, 8, "truncated at byte 0"},
		"reserved byte":         {[]byte{0xc1}, 8, "reserved type byte 0xc1"},
		"trailing bytes":        {[]byte{0x01, 0x02}, 8, "1 bytes after the value"},
		"map short of a value":  {[]byte{0x81, 0x01}, 8, "2 items declared but only 1 bytes follow"},
		"list short of a value": {[]byte{0x92, 0xa1, 'x'}, 8, "truncated at byte 3"},
		"str32 beyond input":    {[]byte("\xdb\xff\xff\xff\xffab"), 8, "4294967295 bytes declared but only 2 follow"},
		"bin8 beyond input":     {[]byte("\xc4\x05abcd"), 8, "5 bytes declared but only 4 follow"},
		"fixstr beyond input":   {[]byte("\xa3ab"), 8, "3 bytes declared but only 2 follow"},
		"ext32":                 {[]byte("\xc9\xc9\xc9\xc9\xc9\xc9"), 8, "extension where only timestamps"},
		"fixext8 not a time":    {[]byte("\xd7\x30\x89\xa10\xc90000"), 8, "extension of type 48"},
		"timestamp truncated":   {[]byte("\xd7\xff\x00\x01"), 8, "8 bytes declared but only 2 follow"},
		"ext8 not 12 bytes":     {[]byte("\xc7\x04\xff\x00\x00\x00\x01"), 8, "extension where only timestamps"},
		"fixext16":              {[]byte("\xd8\x05abc"), 8, "extension of type 5 where only timestamps may be"},
		"truncated length":      {[]byte("\xdb\x00\x01"), 8, "truncated 4-byte length"},
		"truncated int64":       {[]byte("\xd3\x00"), 8, "8 bytes declared but only 1 follow"},
		"map32 beyond input":    {[]byte("\xdf\xff\xff\xff\xff\x01"), 8, "8589934590 items declared but only 1 bytes follow"},
		"array16 beyond input":  {[]byte("\xdc\x00\x03\x01\x02"), 8, "3 items declared but only 2 bytes follow"},
		"too deep":              {nest(9), 8, "at byte 8: nested deeper than 8 levels"},
		"deep in a map":         {append([]byte{0x81, 0xa1, 'k'}, nest(100_000)...), MaxDepth, "nested deeper than 10064 levels"},
		"bad value in a list":   {[]byte{0x92, 0x01, 0xc1}, 8, "at byte 2: reserved type byte"},
	} {
		err := Check(c.in, Options{MaxDepth: c.depth, Timestamps: true})
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Check = %v; want ErrMalformed with %q", name, err, c.want)
		}
	}
	if err := Check(nest(8), Options{MaxDepth: 8}); err != nil {
		t.Errorf("8 levels with limit 8: %v", err)
	}
}

// Check agrees with the library on where a value ends: what it accepts
// the library skips exactly, and what it rejects the library cannot skip
// cleanly (apart from nesting deeper than the limit).
func checkAgreesWithLibrary(t *testing.T, b []byte) {
	err := Check(b, Options{Timestamps: true})
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	skipErr := dec.Skip()
	rest := dec.Buffered().(*bytes.Reader).Len()
	if err == nil && (skipErr != nil || rest != 0) {
		t.Fatalf("Check accepted % x; the library skips with %v leaving %d bytes", b, skipErr, rest)
	}
	if err != nil && !strings.Contains(err.Error(), "nested deeper") && !strings.Contains(err.Error(), "extension") &&
		skipErr == nil && rest == 0 {
		t.Fatalf("Check rejected % x (%v); the library skips it exactly", b, err)
	}
}

func TestCheckAgreesWithLibrary(t *testing.T) {
	for _, b := range validValues(t) {
		checkAgreesWithLibrary(t, b)
		for _, cut := range []int{1, len(b) / 2, len(b) - 1} {
			if cut > 0 && cut < len(b) {
				checkAgreesWithLibrary(t, b[:cut])
			}
		}
	}
}

func TestUnmarshal(t *testing.T) {
	in := &sample{S: "s", B: []byte("b"), I: -5, M: map[string]string{"k": "v"}, L: []any{int8(1), "x"}}
	b, _ := msgpack.Marshal(in)
	var got sample
	if err := Unmarshal(b, &got, Options{Timestamps: true}); err != nil || got.S != "s" || got.M["k"] != "v" || len(got.L) != 2 {
		t.Fatalf("Unmarshal = %+v, %v", got, err)
	}
	var loose any
	if err := Unmarshal([]byte{0x91, 0x05}, &loose, Options{LooseInterfaces: true}); err != nil || loose.([]any)[0] != int64(5) {
		t.Fatalf("loose Unmarshal = %#v, %v", loose, err)
	}
	if err := Unmarshal([]byte("\x81\xa1s\xdb\xff\xff\xff\xff"), &got, Options{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("hostile length: %v", err)
	}
	// The library reads an extension's payload as a map where it wants a
	// map, lengths and all; extensions other than timestamps are refused.
	var hm map[string]string
	if err := Unmarshal([]byte("\xd7\x30\x89\xa10\xc90000"), &hm, Options{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("extension as a map: %v", err)
	}
	var ts struct{ T time.Time }
	tb, _ := msgpack.Marshal(struct{ T time.Time }{time.Unix(1_700_000_000, 5)})
	if err := Unmarshal(tb, &ts, Options{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("timestamp without Timestamps: %v", err)
	}
	if err := Unmarshal(tb, &ts, Options{Timestamps: true}); err != nil || !ts.T.Equal(time.Unix(1_700_000_000, 5)) {
		t.Fatalf("timestamp with Timestamps: %v %v", ts.T, err)
	}
	// A map key that is a list cannot key a Go map; the library panics.
	var m map[any]any
	if err := Unmarshal([]byte{0x81, 0x91, 0x01, 0x02}, &m, Options{}); err == nil {
		t.Fatal("a list as a map key decoded")
	}
	// The default depth is RecordDepth; MaxDepth allows user values.
	deep := append(bytes.Repeat([]byte{0x91}, 5000), 0xc0)
	var v any
	if err := Unmarshal(deep, &v, Options{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("5000 levels under the default depth: %v", err)
	}
	if err := Unmarshal(deep, &v, Options{MaxDepth: MaxDepth}); err != nil {
		t.Fatalf("5000 levels under MaxDepth: %v", err)
	}
}

// FuzzCheck: Check never panics, agrees with the library on where a value
// ends, and what it accepts decodes with memory in proportion to its size.
func FuzzCheck(f *testing.F) {
	for _, b := range validValues(f) {
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte("\xde00\xa1%\xc9\xc9\xc9\xc9\xc9\xc9"))
	f.Add([]byte{0x81, 0x91, 0x01, 0x02})
	f.Add([]byte("\xd70\x89\xa10\xc90000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgreesWithLibrary(t, b)
		var v any
		allocbound.Check(t, len(b), func() { _ = Unmarshal(b, &v, Options{MaxDepth: MaxDepth, LooseInterfaces: true}) })
		var m map[string]string
		allocbound.Check(t, len(b), func() { _ = Unmarshal(b, &m, Options{}) })
	})
}

// Len measures the first value alone, nested items included, and checks
// it as Check does.
func TestLen(t *testing.T) {
	v, err := msgpack.Marshal(map[string]any{"a": []any{1, "two", map[string]any{"x": 3.5}}, "b": nil})
	if err != nil {
		t.Fatal(err)
	}
	next := []byte{0xa1, 'z'}
	if n, err := Len(append(append([]byte{}, v...), next...), Options{}); err != nil || n != len(v) {
		t.Errorf("Len = %d, %v; want %d (the value, not the string after it)", n, err, len(v))
	}
	if _, err := Len(v[:len(v)-1], Options{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("Len of a truncated value: %v; want ErrMalformed", err)
	}
}
