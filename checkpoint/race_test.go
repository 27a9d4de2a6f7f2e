//go:build race

package checkpoint

// raceEnabled: the race detector allocates, so allocation counts are not
// checked under it.
const raceEnabled = true
