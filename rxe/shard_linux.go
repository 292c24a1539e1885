package rxe

// shardsSupported: udp.ListenShards binds SO_REUSEPORT groups.
const shardsSupported = true
