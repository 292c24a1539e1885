//go:build !linux && !windows

package udp

import "syscall"

const msgTrunc = syscall.MSG_TRUNC
