package interpreter

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/runtime"
)

// secretRunes are the characters random secrets are made of: the ones
// every encoding treats specially, and a few that are not ASCII.
var secretRunes = []rune(`abcXYZ019@+/:%"\<>&= ?#-_~.` + "é日😀\u2028\t")

// randomSecret returns n bytes of secretRunes.
func randomSecret(r *rand.Rand, n int) string {
	var sb strings.Builder
	for sb.Len() < n {
		c := secretRunes[r.IntN(len(secretRunes))]
		if sb.Len()+utf8.RuneLen(c) > n {
			c = 'q'
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

// forms computes, independently of encodedForms, the encodings of s that
// the redactor must find whole.
func formsOf(s string) map[string]string {
	jsonHTML, _ := json.Marshal(s)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	jsonPlain := strings.TrimSpace(buf.String())
	var ascii strings.Builder
	for _, c := range jsonPlain[1 : len(jsonPlain)-1] {
		if c < 0x80 {
			ascii.WriteRune(c)
		} else {
			for _, u := range utf16.Encode([]rune{c}) {
				fmt.Fprintf(&ascii, `\u%04x`, u)
			}
		}
	}
	b := []byte(s)
	lower := func(e string) string {
		var sb strings.Builder
		for i := 0; i < len(e); i++ {
			if e[i] == '%' && i+2 < len(e) {
				sb.WriteString("%" + strings.ToLower(e[i+1:i+3]))
				i += 2
				continue
			}
			sb.WriteByte(e[i])
		}
		return sb.String()
	}
	u := &url.URL{Scheme: "http", Host: "h", Path: "/p/" + s}
	return map[string]string{
		"raw":             s,
		"query":           url.QueryEscape(s),
		"query lower hex": lower(url.QueryEscape(s)),
		"path":            url.PathEscape(s),
		"path lower hex":  lower(url.PathEscape(s)),
		"url path":        strings.TrimPrefix(u.EscapedPath(), "/p/"),
		"json":            string(jsonHTML[1 : len(jsonHTML)-1]),
		"json no html":    jsonPlain[1 : len(jsonPlain)-1],
		"json ascii":      ascii.String(),
		"base64":          base64.StdEncoding.EncodeToString(b),
		"base64 url":      base64.URLEncoding.EncodeToString(b),
		"base64 raw":      base64.RawStdEncoding.EncodeToString(b),
		"base64 raw url":  base64.RawURLEncoding.EncodeToString(b),
		"base64 in query": url.QueryEscape(base64.StdEncoding.EncodeToString(b)),
		"hex":             hex.EncodeToString(b),
		"hex upper case":  strings.ToUpper(hex.EncodeToString(b)),
	}
}

// A secret's hex form is found inside a longer hex text (a hex dump, a
// hex-encoded body), in either case.
func TestRedactorFindsSecretInsideLongerHex(t *testing.T) {
	const s = "s3cr3t-hex-value"
	red := newRedactor([]string{s})
	for _, enc := range []func(string) string{func(x string) string { return x }, strings.ToUpper} {
		text := enc(hex.EncodeToString([]byte("pre:" + s + ":post")))
		want := enc(hex.EncodeToString([]byte("pre:"))) + "***" + enc(hex.EncodeToString([]byte(":post")))
		if got := red.text(text); got != want {
			t.Fatalf("redacted %q to %q; want %q", text, got, want)
		}
	}
}

func TestRedactorFindsEveryEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for range 300 {
		s := randomSecret(r, MinSecretLength+r.IntN(24))
		red := newRedactor([]string{s})
		for name, f := range formsOf(s) {
			text := "before " + f + " after"
			if got := red.text(text); got != "before *** after" {
				t.Fatalf("secret %q, %s form %q: redacted to %q; want \"before *** after\"", s, name, f, got)
			}
		}
	}
}

// TestRedactorFindsSecretInsideLongerBase64 puts the secret at every
// alignment inside a longer text and checks that exactly the base64
// characters that carry only the secret's bits are replaced.
func TestRedactorFindsSecretInsideLongerBase64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for range 200 {
		s := randomSecret(r, MinSecretLength+r.IntN(16))
		red := newRedactor([]string{s})
		for p := range 6 {
			prefix, suffix := []byte("XYZ12"[:p]), []byte("tail-bytes"[:r.IntN(6)])
			whole := append(append(append([]byte{}, prefix...), s...), suffix...)
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				b := enc.EncodeToString(whole)
				got := red.text(b)
				before, after, ok := strings.Cut(got, redacted)
				if !ok || strings.Contains(after, redacted) {
					t.Fatalf("secret %q at offset %d in %q: redacted to %q; want one ***", s, p, b, got)
				}
				n := len(s)
				// Characters [first, end) carry bits of s alone; the one on
				// each side of them mixes s with its neighbours.
				first, end := (8*p+5)/6, 8*(p+n)/6
				if len(before) > first || len(before) < 8*p/6 {
					t.Fatalf("secret %q at offset %d in %q: %q left before ***; want %d or %d characters", s, p, b, before, 8*p/6, first)
				}
				last := (8*(p+n) + 5) / 6 // past the last character touching s
				if p%3 == 0 && len(suffix) == 0 {
					last = len(b) // the whole encoding of s, padding included
				}
				if kept := len(b) - len(after); kept < end || kept > last {
					t.Fatalf("secret %q at offset %d in %q: *** ends at %d; want %d..%d", s, p, b, kept, end, last)
				}
				if before != b[:len(before)] || after != b[len(b)-len(after):] {
					t.Fatalf("redaction of %q changed characters around the secret: %q", b, got)
				}
			}
		}
	}
}

// TestRedactorLeavesUnrelatedDataAlone uses secrets of exactly the
// minimum length on data that does not hold them.
func TestRedactorLeavesUnrelatedDataAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 17))
	for range 300 {
		s := randomSecret(r, MinSecretLength)
		red := newRedactor([]string{s})
		other := randomSecret(r, 40)
		if strings.Contains(other, s) {
			continue
		}
		raw := make([]byte, 64)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		doc, _ := json.Marshal(map[string]any{"count": 10, "n": r.Int64(), "text": other, "list": []any{1.5, true, nil}})
		for _, text := range []string{
			"count=10&page=2&q=" + url.QueryEscape(other),
			string(doc),
			base64.StdEncoding.EncodeToString(raw),
			base64.URLEncoding.EncodeToString([]byte(other)),
			s[:MinSecretLength-1] + "| is the secret without its last byte",
		} {
			if got := red.text(text); got != text {
				t.Fatalf("secret %q rewrote unrelated %q to %q", s, text, got)
			}
		}
	}
	numeric := newRedactor([]string{"12345678"})
	if got := numeric.text("count=10, id=1234567"); got != "count=10, id=1234567" {
		t.Fatalf("numeric secret rewrote %q", got)
	}
	v := numeric.value(map[string]any{"count": int64(10), "pin": int64(12345678), "f": 12345678.5, "other": int64(1234567)})
	want := map[string]any{"count": int64(10), "pin": redacted, "f": redacted, "other": int64(1234567)}
	if fmt.Sprint(v) != fmt.Sprint(want) {
		t.Fatalf("value %v; want %v (a number holding the secret becomes ***)", v, want)
	}
}

func TestRedactorMergesOverlappingSecrets(t *testing.T) {
	red := newRedactor([]string{"abcdefgh", "efghijklmn"})
	if got := red.text("<abcdefghijklmn>"); got != "<***>" {
		t.Fatalf("got %q; want <***>: no part of either secret left", got)
	}
	if got := red.text("aaabcdefghabcdefgh"); got != "aa******" {
		t.Fatalf("got %q", got)
	}
}

func TestRedactorDerivedBasicCredentials(t *testing.T) {
	const secret = "p@ss w/rd:+%ok"
	red := newRedactor([]string{secret})
	for _, pair := range []string{"alice:" + secret, secret + ":pw", "carol:" + url.QueryEscape(secret)} {
		header := "Basic " + base64.StdEncoding.EncodeToString([]byte(pair))
		if got := red.text(header); got == "Basic ***" {
			t.Fatalf("%q redacted before derive: the test proves nothing", header)
		}
		red.derive(pair)
		if got := red.text(`{"authorization": "` + header + `"}`); got != `{"authorization": "Basic ***"}` {
			t.Fatalf("after derive(%q): %q", pair, got)
		}
	}
	// A value carrying no secret adds nothing.
	n := len(red.snapshot())
	red.derive("bob:hunter2-not-secret")
	if len(red.snapshot()) != n {
		t.Fatal("derive added the forms of a value that carries no secret")
	}
	var none *redactor
	none.derive("x:y") // a step without secrets has a nil-safe redactor
}

func TestRedactorConcurrentDerive(t *testing.T) {
	const secret = "concurrent-secret"
	red := newRedactor([]string{secret})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			pair := fmt.Sprintf("user%d:%s", i, secret)
			red.derive(pair)
			b := base64.StdEncoding.EncodeToString([]byte(pair))
			if got := red.text(b); got != redacted {
				t.Errorf("%q redacted to %q", b, got)
			}
		})
	}
	wg.Wait()
}

func TestRedactorError(t *testing.T) {
	const secret = "err-secret-value"
	red := newRedactor([]string{secret})
	base := errors.New("boom " + url.QueryEscape("q="+secret))
	err := red.err(runtime.Transient(base))
	if strings.Contains(err.Error(), url.QueryEscape(secret)) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error %q", err)
	}
	var se *runtime.StepError
	if !errors.As(err, &se) || se.Permanent || !errors.Is(err, base) {
		t.Fatalf("redacted error %#v lost its kind or its chain", err)
	}
	if strings.Contains(se.Error(), secret) {
		t.Fatalf("the StepError's message %q holds the secret", se.Error())
	}
	plainErr := errors.New("nothing to hide")
	if red.err(plainErr) != plainErr {
		t.Fatal("an error without secrets should come back as it was")
	}
}

func TestEncodedFormsAreLongEnough(t *testing.T) {
	// Every pattern of a minimum-length secret is long enough not to
	// match unrelated data by chance.
	r := rand.New(rand.NewPCG(1, 9))
	for range 100 {
		for _, f := range encodedForms(randomSecret(r, MinSecretLength)) {
			if len(f) < MinSecretLength {
				t.Fatalf("form %q is shorter than %d bytes", f, MinSecretLength)
			}
		}
	}
}

// BenchmarkRedact measures redaction of a 1 MiB text holding no secret:
// the cost every output, error and log line pays, per secret.
func BenchmarkRedact(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=%\\\" {}:,"
	text := make([]byte, 1<<20)
	for i := range text {
		text[i] = letters[r.IntN(len(letters))]
	}
	for _, c := range []struct{ name, secret string }{
		{"alphanumeric", "tok3nAlphaNum3ric"},
		{"special", `p@ss w/rd+%:="<&>\é€`},
	} {
		b.Run(c.name, func(b *testing.B) {
			red := newRedactor([]string{c.secret})
			b.SetBytes(int64(len(text)))
			s := string(text)
			for b.Loop() {
				if red.text(s) != s {
					b.Fatal("redacted a text without the secret")
				}
			}
			b.ReportMetric(float64(len(red.snapshot())), "forms")
		})
	}
}
