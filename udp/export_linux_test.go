package udp

import "syscall"

// FailGSOSends makes s's GSO sends fail with errno (test hook).
func FailGSOSends(s *Socket, errno syscall.Errno) { s.wr.failGSO = errno }
