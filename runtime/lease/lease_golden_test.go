package lease

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// The writer lease object and the file stores' lock file as today's code
// writes them (encoding/json of Info), from fixed holders. Writers of
// other builds read them to decide a takeover, so a change fails
// TestGoldenInfo; see docs/STORE-LAYOUT.md, "Fixtures".
func TestGoldenInfo(t *testing.T) {
	acquired := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		info Info
	}{
		{"lease-object.v1.json", Info{Owner: "01JGZ0000000000000000000LS", Host: "build-1", BootID: "0b0e1d2c-0000-4000-8000-000000000001",
			PIDNamespace: "pid:[4026531836]", PID: 4242, PIDStart: 123456, Endpoint: "http://127.0.0.1:7700",
			Acquired: acquired, Renewed: acquired.Add(10 * time.Second), Renewals: 2, TTL: 15 * time.Second,
			Expires: acquired.Add(25 * time.Second), Mechanism: MechanismObject}},
		{"lease-released.v1.json", Info{Owner: "01JGZ0000000000000000000LS", Host: "build-1", PID: 4242,
			Acquired: acquired, Renewed: acquired, TTL: 15 * time.Second, Expires: acquired.Add(15 * time.Second),
			Released: true, Mechanism: MechanismObject}},
		{"lock-file.v1.json", Info{Owner: "01JGZ0000000000000000000LF", Host: "build-1", BootID: "0b0e1d2c-0000-4000-8000-000000000001",
			PID: 4243, PIDStart: 123457, Acquired: acquired, Renewed: acquired, Mechanism: MechanismFlock}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.info)
			if err != nil {
				t.Fatal(err)
			}
			b = golden.Check(t, filepath.Join("testdata", "golden", tc.name), b)
			got, err := decodeInfo(b)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.info
			if !got.Acquired.Equal(want.Acquired) || !got.Renewed.Equal(want.Renewed) || !got.Expires.Equal(want.Expires) {
				t.Fatalf("times %v %v %v, want %v %v %v", got.Acquired, got.Renewed, got.Expires, want.Acquired, want.Renewed, want.Expires)
			}
			got.Acquired, got.Renewed, got.Expires = want.Acquired, want.Renewed, want.Expires
			if got != want {
				t.Fatalf("decoded\n %+v\nwant\n %+v", got, want)
			}
		})
	}
}
