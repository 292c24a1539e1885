package mad

// GID is a 128-bit InfiniBand global identifier; on RoCEv2 it is an IPv6
// address or an IPv4-mapped IPv6 address.
type GID [16]byte

// Path is the path description a REQ (primary and alternate) and a LAP
// (alternate) carry.
type Path struct {
	LocalLID        uint16 // 0xFFFF (permissive) on RoCEv2
	RemoteLID       uint16
	LocalGID        GID
	RemoteGID       GID
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits, IBTA rate encoding
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalAckTimeout Timeout // 5 bits
}

// IsZero reports whether p is the all-zero path (an absent alternate).
func (p *Path) IsZero() bool { return *p == Path{} }

func (f *pathFields) put(d []byte, p *Path) {
	f.LocalLID.Set(d, uint64(p.LocalLID))
	f.RemoteLID.Set(d, uint64(p.RemoteLID))
	f.LocalGID.putBytes(d, p.LocalGID[:])
	f.RemoteGID.putBytes(d, p.RemoteGID[:])
	f.FlowLabel.Set(d, uint64(p.FlowLabel))
	f.PacketRate.Set(d, uint64(p.PacketRate))
	f.TrafficClass.Set(d, uint64(p.TrafficClass))
	f.HopLimit.Set(d, uint64(p.HopLimit))
	f.SL.Set(d, uint64(p.SL))
	f.SubnetLocal.setBool(d, p.SubnetLocal)
	f.LocalAckTimeout.Set(d, uint64(p.LocalAckTimeout))
}

func (f *pathFields) get(d []byte, p *Path) {
	p.LocalLID = uint16(f.LocalLID.Get(d))
	p.RemoteLID = uint16(f.RemoteLID.Get(d))
	copy(p.LocalGID[:], f.LocalGID.Bytes(d))
	copy(p.RemoteGID[:], f.RemoteGID.Bytes(d))
	p.FlowLabel = uint32(f.FlowLabel.Get(d))
	p.PacketRate = uint8(f.PacketRate.Get(d))
	p.TrafficClass = uint8(f.TrafficClass.Get(d))
	p.HopLimit = uint8(f.HopLimit.Get(d))
	p.SL = uint8(f.SL.Get(d))
	p.SubnetLocal = f.SubnetLocal.bool(d)
	p.LocalAckTimeout = Timeout(f.LocalAckTimeout.Get(d))
}
