// Package golden checks encoders and decoders against byte fixtures kept in
// a package's testdata, so a change that alters an on-disk or on-wire byte
// layout fails a test instead of passing every round trip.
//
// A fixture is named <kind>.v<N>.<ext>, where N is the version of the
// format it holds (testdata/golden/wal.v1.bin). [Check] compares today's
// encoding with the fixture. The test flag -update (registered here) only
// creates fixtures that are missing: it never rewrites an existing one, so
// a test whose encoding differs from its fixture fails until the developer
// bumps the format version and adds a fixture of the new name. The old
// fixture stays, decoded by a test of its own, for as long as the format
// promises to read it.
//
// [Read] returns a fixture's bytes for decode-only tests of formats that
// today's code no longer writes, and [AddCorpus] seeds a fuzz target with
// every fixture that matches a pattern.
//
// It makes no object-store requests.
package golden
