package udp

import "syscall"

// FailGSOSends makes s's GSO sends fail with errno (test hook).
func FailGSOSends(s *Socket, errno syscall.Errno) { s.wr.failGSO = errno }

// GROBuffers returns how many GRO receive buffers r has made.
func GROBuffers(r *PollReader) int { return r.v.live }

// ReadBatchGROBuffers returns how many GRO receive buffers s's
// ReadBatch vector has made.
func ReadBatchGROBuffers(s *Socket) int { return s.rd.live }
