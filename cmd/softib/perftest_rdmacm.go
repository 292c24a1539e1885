package main

import (
	"os"

	"softib/tools/perftestcm"
)

// The perf tools' -R mode: perftest's RDMA CM control channel and test-QP
// connections over softib's RDMA CM.
func init() { perfRDMACM = &perftestcm.Hook{Progress: os.Stderr} }
