//go:build !race

package aws

// raceEnabled reports that the race detector is on.
const raceEnabled = false
