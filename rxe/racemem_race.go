//go:build race

package rxe

import "sync"

// raceMem orders every copy the device makes into or out of registered
// memory, in -race builds only. On a real HCA the order of two DMA
// writes that an application sequences through the network (QP 1's
// WRITE completes at the peer, which then WRITEs the same bytes through
// QP 2) is the order of the wire; the race detector sees no
// happens-before through a socket, so two receive shards placing those
// writes looked like a data race. Serialising the placements turns the
// wire order into a lock order the detector can see. Ordinary builds
// compile it away (racemem_norace.go).
var raceMem sync.Mutex

func raceMemLock()   { raceMem.Lock() }
func raceMemUnlock() { raceMem.Unlock() }
