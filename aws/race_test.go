//go:build race

package aws

// raceEnabled reports that the race detector is on: sync.Pool then drops
// some of what is put back, on purpose, and a reuse allocates.
const raceEnabled = true
