//go:build race

package runtime

// raceEnabled scales long tests down under the race detector.
const raceEnabled = true
