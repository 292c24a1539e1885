// Package o2iblnd is the LNet InfiniBand network driver (net type o2ib,
// NIDs like 192.168.77.1@o2ib), byte-compatible with Lustre's ko2iblnd
// (lnet-wire.md §6), running over softib verbs and the RDMA CM.
//
// The credit and flow-control rules live in a pure state machine, Flow
// (credits.go), which the driver drives under each connection's lock.
package o2iblnd
