//go:build race

package validate_test

// raceEnabled lets the slowest exhaustive tests run a smaller sample under
// the race detector, which makes them about ten times slower.
const raceEnabled = true
