//go:build !race

package rxe_test

const raceEnabled = false
