//go:build !race

package rxe

// See racemem_race.go: without -race, placements need no extra order.
func raceMemLock()   {}
func raceMemUnlock() {}
