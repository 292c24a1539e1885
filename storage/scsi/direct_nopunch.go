//go:build !linux

package scsi

import (
	"errors"
	"fmt"
)

// errPunchUnsupported is what punchHole returns where the system has no
// hole-punching call softib uses; Discard then writes zeros.
var errPunchUnsupported = fmt.Errorf("scsi: punching holes: %w", errors.ErrUnsupported)
