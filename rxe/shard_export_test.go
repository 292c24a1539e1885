package rxe

import "softib/udp"

// ShardDatagrams returns the datagrams each receive shard's socket
// handed out (nil entries for Conns that are not udp.Sockets count 0).
func ShardDatagrams(d *Device) []uint64 {
	out := make([]uint64, len(d.shards))
	for i, sh := range d.shards {
		if s, ok := sh.conn.(*udp.Socket); ok {
			out[i] = s.Stats.RxDatagrams.Load()
		}
	}
	return out
}
