//go:build race

package rxe_test

// raceEnabled reports a -race build (sync.Pool drops items at random
// then, so allocation counts are not meaningful).
const raceEnabled = true
