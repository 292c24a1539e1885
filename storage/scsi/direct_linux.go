package scsi

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens path with O_DIRECT: aligned I/O bypasses the page cache.
func openDirect(path string, flag int) (*os.File, error) {
	return os.OpenFile(path, flag|unix.O_DIRECT, 0)
}

// punchHole deallocates [off, off+n) keeping the file's size; the range
// reads back as zeros.
func punchHole(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
