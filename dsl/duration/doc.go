// Package duration parses the durations workflows write: Go durations
// ("1h30m", "250ms") plus whole or fractional days ("2d", "1d12h", "1.5d").
// Negative durations are rejected: no workflow setting wants one.
package duration
