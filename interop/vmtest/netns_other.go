//go:build !linux

package vmtest

import (
	"errors"
	"fmt"
)

// inNetns refuses: network namespaces, and so the interop guest's
// network, exist on Linux only.
func inNetns(ns string, _ func() error) error {
	return fmt.Errorf("vmtest: network namespace %s: %w (Linux only)", ns, errors.ErrUnsupported)
}
