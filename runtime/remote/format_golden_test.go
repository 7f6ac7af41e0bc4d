package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// The inbox's objects and markers written by today's encoders from fixed
// inputs: one command and one marker of each kind, answers, the doorbell.
// Writers and clients of other builds read them, so a layout change fails
// these tests; see docs/STORE-LAYOUT.md, "Fixtures".

var (
	goldenSentAt    = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	goldenExpires   = time.Date(2026, 1, 2, 3, 9, 5, 0, time.UTC)
	goldenAppliedAt = time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)
)

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name) }

func TestGoldenCommands(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  inboxCommand
	}{
		{"command-submit.v1.json", inboxCommand{V: inboxFormat, ID: "01JGZ4C0000000000000000001", Kind: CommandSubmit,
			RunID: "order-7", Input: []byte(`{"n":1}`), Headers: map[string]string{"traceparent": "00-a-b-01", "x-user": "u"},
			Labels: map[string]string{"team": "infra"}, KVWrites: map[string][]byte{"app/a": []byte("A"), "app/b": {}},
			Client: "tqw/1 host 42", SentAt: goldenSentAt, Expires: goldenExpires}},
		{"command-signal.v1.json", inboxCommand{V: inboxFormat, ID: "01JGZ4C0000000000000000002", Kind: CommandSignal,
			Key: "approve/order-7", Payload: []byte(`{"ok":true}`), RequireWaiting: true, SentAt: goldenSentAt}},
		{"command-clear-signal.v1.json", inboxCommand{V: inboxFormat, ID: "01JGZ4C0000000000000000003", Kind: CommandClearSignal,
			Key: "approve/order-7", SentAt: goldenSentAt}},
		{"command-cancel.v1.json", inboxCommand{V: inboxFormat, ID: "01JGZ4C0000000000000000004", Kind: CommandCancel,
			RunID: "order-7", SentAt: goldenSentAt, Expires: goldenExpires}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeCommand(&tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			b = golden.Check(t, goldenPath(tc.name), b)
			got, err := decodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.cmd
			want.Magic = commandMagic
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("decoded\n %+v\nwant\n %+v", *got, want)
			}
		})
	}
}

func TestGoldenAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		ans  inboxAnswer
	}{
		{"answer-submit.v1.json", inboxAnswer{V: inboxFormat, ID: "01JGZ4C0000000000000000001", Kind: CommandSubmit,
			RunID: "order-7", JobID: "0000000000000042", NewlySubmitted: true, Writer: "tqw/1 host 7", AppliedAt: goldenAppliedAt}},
		{"answer-signal.v1.json", inboxAnswer{V: inboxFormat, ID: "01JGZ4C0000000000000000002", Kind: CommandSignal,
			Signal: "buffered", SignalExpires: goldenExpires, AppliedAt: goldenAppliedAt}},
		{"answer-cancel.v1.json", inboxAnswer{V: inboxFormat, ID: "01JGZ4C0000000000000000004", Kind: CommandCancel,
			RunID: "order-7", OK: true, AppliedAt: goldenAppliedAt}},
		{"answer-rejected.v1.json", inboxAnswer{V: inboxFormat, ID: "01JGZ4C0000000000000000005", Kind: CommandSignal,
			Code: "no_waiter", Error: "signal: no step waits on the key", AppliedAt: goldenAppliedAt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.ans)
			if err != nil {
				t.Fatal(err)
			}
			b = golden.Check(t, goldenPath(tc.name), b)
			got, err := decodeAnswer(b)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.ans
			want.Magic = answerMagic
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("decoded\n %+v\nwant\n %+v", *got, want)
			}
		})
	}
	// A rejection's code still names its sentinel error.
	if sentinelOf("no_waiter") == nil {
		t.Fatal(`the code "no_waiter" names no error`)
	}
}

func TestGoldenMarkers(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    inboxMarker
	}{
		{"marker-submit.v1.bin", inboxMarker{Kind: CommandSubmit, Active: "01JGZ4C000000000000000000A", Result: "01JGZ4C000000000000000000B", AtMs: 1767323045600}},
		{"marker-signal.v1.bin", inboxMarker{Kind: CommandSignal, Buf: []byte{2, 0, 1, 2, 3}, Outcome: "delivered", AtMs: 1767323045600}},
		{"marker-clear-signal.v1.bin", inboxMarker{Kind: CommandClearSignal, Cleared: true, AtMs: 1767323045600}},
		{"marker-cancel.v1.bin", inboxMarker{Kind: CommandCancel, Active: "01JGZ4C000000000000000000A", AtMs: 1767323045600}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeMarker(&tc.m)
			if err != nil {
				t.Fatal(err)
			}
			b = golden.Check(t, goldenPath(tc.name), b)
			got, err := decodeInboxMarker(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.m) {
				t.Fatalf("decoded %+v, want %+v", *got, tc.m)
			}
		})
	}
}

// TestGoldenBell: the doorbell's content is never decoded (a writer reads
// its ETag), but other builds' clients write it, so its bytes are fixed.
func TestGoldenBell(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	if err := ring(ctx, store, DefaultInboxPrefix, "01JGZ4C0000000000000000001"); err != nil {
		t.Fatal(err)
	}
	b, _, err := store.Get(ctx, bellKey(DefaultInboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath("bell.v1.json"), b)
	var bell struct {
		Tqw string `json:"tqw"`
		ID  string `json:"id"`
	}
	if err := json.Unmarshal(b, &bell); err != nil || bell.Tqw != bellFormat || bell.ID != "01JGZ4C0000000000000000001" {
		t.Fatalf("doorbell %+v, %v", bell, err)
	}
	if !bytes.Contains(b, []byte(`"tqw":"inbox-bell"`)) {
		t.Fatalf("doorbell %s lacks its magic", b)
	}
}
