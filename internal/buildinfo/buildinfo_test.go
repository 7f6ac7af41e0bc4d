package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/tqw-dsl/tqw", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-01-02T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := Info{Path: "github.com/tqw-dsl/tqw", Version: "v1.2.3", Revision: "abc", Time: "2026-01-02T10:00:00Z", Modified: true, GoVersion: "go1.26.0"}
	if got := From(bi); got != want {
		t.Errorf("From = %+v; want %+v", got, want)
	}
	if got := From(nil); got != (Info{}) {
		t.Errorf("From(nil) = %+v; want the zero Info", got)
	}
	// A test binary carries build information: its toolchain at least.
	if in, ok := Read(); !ok || in.GoVersion == "" {
		t.Errorf("Read = %+v, %v; want the test binary's toolchain", in, ok)
	}
}
