package lnetwire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// PingMagic is LNET_PROTO_PING_MAGIC, the first word of lnet_ping_info.
const PingMagic uint32 = 0x70696E67

// Ping feature bits in pi_features (lnet-wire.md §5.3).
const (
	PingFeatBase         uint32 = 1 << 0
	PingFeatNIStatus     uint32 = 1 << 1
	PingFeatRteDisabled  uint32 = 1 << 2
	PingFeatMultiRail    uint32 = 1 << 3
	PingFeatDiscovery    uint32 = 1 << 4
	PingFeatLargeAddr    uint32 = 1 << 5
	PingFeatPrimaryLarge uint32 = 1 << 6
	PingFeatMetadata     uint32 = 1 << 7
)

// NI status values in a ping entry.
const (
	PingStatusUp   uint32 = 0x15AAC0DE
	PingStatusDown uint32 = 0xDEADFACE
)

// Ping buffer sizes.
const (
	PingInfoHdrSize   = 16
	PingInfoEntrySize = 16
	// PingMatchBits selects the ping MD on the reserved portal 0.
	PingMatchBits uint64 = 0x8000000000000000
	// ReservedPortal is the portal of ping and discovery push.
	ReservedPortal = 0
)

// PingNI is one lnet_ni_status entry of a ping buffer.
type PingNI struct {
	NID    NID
	Status uint32 // PingStatusUp/Down; entry 0 (0@lo) carries the ping sequence
	// MsgSize is the NI's message size hint (0 when not advertised).
	MsgSize uint32
}

// PingInfo is the decoded lnet_ping_info (lnet-wire.md §5.2). By Lustre
// convention NIs[0] is 0@lo and NIs[1] is the primary NID.
type PingInfo struct {
	Features uint32
	PID      PID
	NIs      []PingNI
}

// Len returns the wire size: 16 + 16 per NI.
func (p *PingInfo) Len() int { return PingInfoHdrSize + PingInfoEntrySize*len(p.NIs) }

// Append appends the little-endian (native for softib) wire form to b.
func (p *PingInfo) Append(b []byte) []byte {
	b = le.AppendUint32(b, PingMagic)
	b = le.AppendUint32(b, p.Features)
	b = le.AppendUint32(b, uint32(p.PID))
	b = le.AppendUint32(b, uint32(len(p.NIs)))
	for _, ni := range p.NIs {
		b = le.AppendUint64(b, uint64(ni.NID))
		b = le.AppendUint32(b, ni.Status)
		b = le.AppendUint32(b, ni.MsgSize)
	}
	return b
}

// ParsePingInfo decodes a ping buffer sent in either byte order: a
// byte-reversed magic means the sender was big-endian and every field is
// swapped. Bytes after the last entry are ignored (large-NID extensions).
func ParsePingInfo(b []byte) (PingInfo, error) {
	var p PingInfo
	if len(b) < PingInfoHdrSize {
		return p, shortError("lnet_ping_info", PingInfoHdrSize, len(b))
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch m := le.Uint32(b); m {
	case PingMagic:
	case bits.ReverseBytes32(PingMagic):
		bo = binary.BigEndian
	default:
		return p, fmt.Errorf("%w: ping magic %#08x", ErrBadMagic, m)
	}
	p.Features = bo.Uint32(b[4:])
	p.PID = PID(bo.Uint32(b[8:]))
	n := bo.Uint32(b[12:])
	if avail := uint64(len(b)-PingInfoHdrSize) / PingInfoEntrySize; uint64(n) > avail {
		return PingInfo{}, shortError("lnet_ping_info entries", PingInfoHdrSize+int(min(uint64(n), 1<<24))*PingInfoEntrySize, len(b))
	}
	p.NIs = make([]PingNI, n)
	for i := range p.NIs {
		e := b[PingInfoHdrSize+i*PingInfoEntrySize:]
		p.NIs[i] = PingNI{NID(bo.Uint64(e)), bo.Uint32(e[8:]), bo.Uint32(e[12:])}
	}
	return p, nil
}

// Seq returns the ping buffer's sequence number: the status of its 0@lo
// entry (0 when there is none).
func (p *PingInfo) Seq() uint32 {
	for _, e := range p.NIs {
		if e.NID == NIDLo0 {
			return e.Status
		}
	}
	return 0
}

// Primary returns the sender's primary NID: its first entry that is not
// 0@lo (NIDAny when there is none).
func (p *PingInfo) Primary() NID {
	for _, e := range p.NIs {
		if e.NID != NIDLo0 {
			return e.NID
		}
	}
	return NIDAny
}
