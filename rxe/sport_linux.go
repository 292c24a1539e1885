package rxe

import "syscall"

// sportSocketLimit bounds a device's source-port sockets to half the file
// descriptors the process may open (RLIMIT_NOFILE), so that they never
// starve the rest of the program: the QPs beyond it send from the device
// port. There are at most 16384 source ports.
func sportSocketLimit() int {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 512
	}
	return int(min(r.Cur/2, 1<<14))
}
