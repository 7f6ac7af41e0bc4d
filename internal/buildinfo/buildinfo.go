// Package buildinfo reads what a tqw binary says about its own build
// (module version, VCS revision, Go toolchain), for `tqw-dsl --version`,
// the tqw_build_info metric and the service.version of traces: one
// reading of runtime/debug's build information, so the three agree.
// It costs no object-store request and no I/O.
package buildinfo

import "runtime/debug"

// Info is a binary's build, from debug.ReadBuildInfo.
type Info struct {
	// Path and Version are the main module's ("(devel)" when built from
	// a checkout without a version tag; "" when unknown).
	Path, Version string
	// Revision, Time and Modified are the VCS settings (vcs.revision,
	// vcs.time, vcs.modified); "" and false when the build has none (go
	// run, go test, -buildvcs=false).
	Revision, Time string
	Modified       bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// From returns the Info of bi; the zero Info when bi is nil.
func From(bi *debug.BuildInfo) Info {
	if bi == nil {
		return Info{}
	}
	in := Info{Path: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Read returns the running binary's Info, and false when the binary
// carries no build information.
func Read() (Info, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}, false
	}
	return From(bi), true
}
