//go:build race

package integration

// raceEnabled: the race detector multiplies memory use, so memory bounds do not apply.
const raceEnabled = true
