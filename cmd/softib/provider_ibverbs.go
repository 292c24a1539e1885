//go:build ibverbs && linux && cgo

package main

// With -tags ibverbs the tools can also drive the kernel's RDMA devices
// (--provider ibverbs).
import _ "softib/ibverbs"
