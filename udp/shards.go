package udp

import "errors"

// MaxShards bounds ListenShards' socket count.
const MaxShards = 256

// ErrShards is returned by ListenShards for a shard count it cannot
// honour.
var ErrShards = errors.New("udp: shard count not supported")
