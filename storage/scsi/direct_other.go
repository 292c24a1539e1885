//go:build !linux && !freebsd && !darwin

package scsi

import (
	"errors"
	"os"
)

// openDirect reports errors.ErrUnsupported: this system has no direct I/O
// flag softib knows, so FileBackend does all I/O buffered.
func openDirect(string, int) (*os.File, error) {
	return nil, errors.ErrUnsupported
}

// punchHole reports errors.ErrUnsupported, so Discard writes zeros.
func punchHole(*os.File, int64, int64) error { return errPunchUnsupported }
