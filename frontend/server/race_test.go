//go:build race

package server

// raceEnabled: the race detector keeps shadow memory and per-goroutine
// state, which inflates the RSS that memory tests measure.
const raceEnabled = true
