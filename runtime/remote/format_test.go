package remote

import (
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"
)

// The inbox's formats are read by writers and clients of other versions:
// these bytes were produced by the inbox before it moved out of package
// runtime, and must not change.
func TestWireFormatsUnchanged(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	check := func(what string, got []byte, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	b, err := encodeCommand(&inboxCommand{V: inboxFormat, ID: "01JCMD", Kind: CommandSignal, Key: "k", Payload: []byte("p"),
		RequireWaiting: true, Client: "c", SentAt: at, Expires: at.Add(time.Minute)})
	check("signal command", b, err, `{"tqw":"inbox-command","v":1,"id":"01JCMD","kind":"signal","key":"k","payload":"cA==","require_waiting":true,"client":"c","sent_at":"2026-03-04T05:06:07Z","expires":"2026-03-04T05:07:07Z"}`)
	b, err = encodeCommand(&inboxCommand{V: inboxFormat, ID: "01JSUB", Kind: CommandSubmit, RunID: "r", Input: []byte("in"),
		Headers: map[string]string{"h": "v"}, KVWrites: map[string][]byte{"a": []byte("b")}, SentAt: at})
	check("submit command", b, err, `{"tqw":"inbox-command","v":1,"id":"01JSUB","kind":"submit","run_id":"r","input":"aW4=","headers":{"h":"v"},"kv_writes":{"a":"Yg=="},"sent_at":"2026-03-04T05:06:07Z"}`)
	b, err = json.Marshal(&inboxAnswer{V: inboxFormat, ID: "01JCMD", Kind: CommandSignal, Signal: "buffered", SignalExpires: at, Writer: "w", AppliedAt: at})
	check("signal answer", b, err, `{"tqw":"inbox-answer","v":1,"id":"01JCMD","kind":"signal","signal":"buffered","signal_expires":"2026-03-04T05:06:07Z","writer":"w","applied_at":"2026-03-04T05:06:07Z"}`)
	b, err = json.Marshal(&inboxAnswer{V: inboxFormat, ID: "01JSUB", Kind: CommandSubmit, RunID: "r", JobID: "j", NewlySubmitted: true, OK: true,
		Code: "input_mismatch", Error: "e", AppliedAt: at})
	check("submit answer", b, err, `{"tqw":"inbox-answer","v":1,"id":"01JSUB","kind":"submit","run_id":"r","job_id":"j","newly_submitted":true,"ok":true,"code":"input_mismatch","error":"e","applied_at":"2026-03-04T05:06:07Z"}`)
	for _, c := range []struct {
		m    inboxMarker
		want string
	}{
		{inboxMarker{Kind: CommandSignal, Buf: []byte{2, 1}, Outcome: "delivered", AtMs: 5}, "84a16ba67369676e616ca162c4020201a16fa964656c697665726564a174d30000000000000005"},
		{inboxMarker{Kind: CommandSubmit, Active: "a", Result: "r", AtMs: 6}, "84a16ba67375626d6974a161a161a172a172a174d30000000000000006"},
		{inboxMarker{Kind: CommandClearSignal, Cleared: true, AtMs: 7}, "83a16bac636c6561725f7369676e616ca163c3a174d30000000000000007"},
	} {
		b, err := encodeMarker(&c.m)
		check(string(c.m.Kind)+" marker", []byte(hex.EncodeToString(b)), err, c.want)
	}
	if k := inboxMarkerKey("01JCMD"); k != "workflow/inbox/01JCMD" {
		t.Errorf("marker key %q, want workflow/inbox/01JCMD", k)
	}
}
