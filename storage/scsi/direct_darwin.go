package scsi

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens path with F_NOCACHE set, darwin's equivalent of
// O_DIRECT (it has no alignment rule, so the EINVAL fallback never fires).
func openDirect(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_NOCACHE, 1); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// punchHole reports errors.ErrUnsupported (darwin's F_PUNCHHOLE works on
// APFS only and wants block-aligned ranges), so Discard writes zeros.
func punchHole(*os.File, int64, int64) error { return errPunchUnsupported }
