//go:build race

package kv

// raceEnabled scales long randomized tests down under the race detector.
const raceEnabled = true
