package duration

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := map[string]time.Duration{
		"0": 0, "30s": 30 * time.Second, "1h30m": 90 * time.Minute, "2d": 48 * time.Hour,
		"1d12h": 36 * time.Hour, "1.5d": 36 * time.Hour, " 250ms ": 250 * time.Millisecond,
	}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1s", "d", "xd", "1d-1h", "10", "1w", "-2d", "1e300d"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) succeeded; want error", in)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, 90 * time.Minute, 48 * time.Hour, 36 * time.Hour, 49*time.Hour + time.Second} {
		got, err := Parse(Format(d))
		if err != nil || got != d {
			t.Errorf("Parse(Format(%v)=%q) = %v, %v", d, Format(d), got, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1d", "1h", "1.5d2h", "-1s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err == nil && d < 0 {
			t.Fatalf("Parse(%q) = %v < 0", s, d)
		}
	})
}
