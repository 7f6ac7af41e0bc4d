package duration

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Parse parses s. A leading day component ("<number>d") may be followed by a
// Go duration; a bare "0" is zero.
func Parse(s string) (time.Duration, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("duration %q: empty; write e.g. 30s, 5m, 2h or 1d", orig)
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("duration %q: must not be negative", orig)
	}
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
			return 0, fmt.Errorf("duration %q: bad day count %q; write e.g. 2d or 1d12h", orig, s[:i])
		}
		if n*24 > float64(math.MaxInt64)/float64(time.Hour) {
			return 0, fmt.Errorf("duration %q: too long", orig)
		}
		days = time.Duration(n * 24 * float64(time.Hour))
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: write a number with a unit (ms, s, m, h, d), e.g. 30s or 1d12h", orig)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q: must not be negative", orig)
	}
	if days > 0 && d > math.MaxInt64-days {
		return 0, fmt.Errorf("duration %q: too long", orig)
	}
	return days + d, nil
}

// Format renders d in a form Parse accepts, using days for whole days.
func Format(d time.Duration) string {
	day := 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	if d > day {
		rest := d % day
		return strconv.FormatInt(int64(d/day), 10) + "d" + rest.String()
	}
	return d.String()
}
