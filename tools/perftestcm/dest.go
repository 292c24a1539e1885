package perftestcm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"softib/tools/perftest"
	"softib/verbs"
)

// DestLen is the size of struct pingpong_dest on the wire (x86-64
// layout: five ints, 4 bytes of padding, the 64-bit vaddr, the 16-byte
// GID, srqn and gid_index).
const DestLen = 56

// Offsets of struct pingpong_dest. perftest built with HAVE_ENDIAN (any
// glibc build) converts every integer to big-endian before sending.
const (
	offLID      = 0
	offOutReads = 4
	offQPN      = 8
	offPSN      = 12
	offRKey     = 16
	offVAddr    = 24 // after 4 bytes of padding
	offGID      = 32
	offSRQN     = 48
	offGIDIndex = 52
)

// ErrShortDest reports a key message shorter than DestLen.
var ErrShortDest = errors.New("perftestcm: short pingpong_dest")

// AppendDest appends k as perftest -R sends it (rdma_write_keys);
// gidIndex fills the gid_index field.
func AppendDest(b []byte, k perftest.Key, gidIndex int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(k.LID))
	b = binary.BigEndian.AppendUint32(b, uint32(k.OutReads))
	b = binary.BigEndian.AppendUint32(b, k.QPN)
	b = binary.BigEndian.AppendUint32(b, k.PSN)
	b = binary.BigEndian.AppendUint32(b, k.RKey)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, k.VAddr)
	b = append(b, k.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, k.SRQN)
	return binary.BigEndian.AppendUint32(b, uint32(int32(gidIndex)))
}

// ParseDest decodes a pingpong_dest (rdma_read_keys). The key always
// has a GID (RoCE); the padding is ignored.
func ParseDest(b []byte) (k perftest.Key, gidIndex int, err error) {
	if len(b) < DestLen {
		return k, 0, fmt.Errorf("%w: %d bytes, want %d", ErrShortDest, len(b), DestLen)
	}
	be := binary.BigEndian
	k = perftest.Key{LID: uint16(be.Uint32(b[offLID:])), OutReads: uint16(be.Uint32(b[offOutReads:])),
		QPN: be.Uint32(b[offQPN:]), PSN: be.Uint32(b[offPSN:]), RKey: be.Uint32(b[offRKey:]),
		VAddr: be.Uint64(b[offVAddr:]), SRQN: be.Uint32(b[offSRQN:]), HasGID: true}
	k.GID = verbs.GID(b[offGID : offGID+16])
	return k, int(int32(be.Uint32(b[offGIDIndex:]))), nil
}
