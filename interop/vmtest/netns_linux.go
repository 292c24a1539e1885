package vmtest

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread switched into the named network namespace
// (as made by ip netns), so the sockets fn opens live there. Call it on a
// goroutine of its own: the thread is unlocked (and so reused) only if
// switching back succeeds, otherwise it dies with the goroutine.
func inNetns(ns string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(orig)
	fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return err
	}
	err = fn()
	if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr == nil {
		runtime.UnlockOSThread()
	}
	return err
}
