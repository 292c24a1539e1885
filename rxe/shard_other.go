//go:build !linux

package rxe

// shardsSupported: without Linux's SO_REUSEPORT flow hashing a device
// receives on one socket by default (udp.ListenShards refuses more).
const shardsSupported = false
