//go:build windows

package udp

// msgTrunc: Windows reports truncation as an error, not a flag.
const msgTrunc = 0
