package roce

// Wire constants of RoCEv2 and of the Linux rxe conventions softib follows.
const (
	// UDPPort is the RoCEv2 UDP destination port (IANA "roce").
	UDPPort = 4791
	// SrcPortBase is rxe's source-port base (RXE_ROCE_V2_SPORT); source
	// ports are SrcPortBase | 14 bits of flow hash.
	SrcPortBase = 0xC000
	// GSIQPN is the General Services Interface QP (QP1), used by the CM.
	GSIQPN = 1
	// GSIQKey is the well-known Q_Key of QP1 (IBTA Vol 1 §13.4.7.2).
	GSIQKey = 0x80010000
	// DefaultPKey is the full-membership default partition key; rxe always
	// sends it.
	DefaultPKey = 0xFFFF
	// QPNMask selects the 24 bits of a QP number.
	QPNMask = 0x00FFFFFF
	// MaxPad is the largest PadCnt.
	MaxPad = 3
	// MinPacketLen is the shortest valid RoCE UDP payload: BTH + ICRC.
	MinPacketLen = BTHSize + ICRCSize
	// MaxHeaderLen is the longest BTH + extension headers of any opcode.
	MaxHeaderLen = BTHSize + RDETHSize + DETHSize + AtomicETHSize
	// RxeMaxHdrOverhead is the header overhead rxe subtracts from the
	// netdev MTU to find the active IB MTU (RXE_MAX_HDR_LENGTH).
	RxeMaxHdrOverhead = 80
	// GRHSize is the size of the GRH area that UD/GSI receive buffers carry
	// in front of the payload (an IPv4 header at offset 20 for RoCEv2/IPv4).
	GRHSize = 40
	// IPv4HeaderLen, IPv6HeaderLen and UDPHeaderLen are the encapsulation
	// header sizes (IPv4 without options).
	IPv4HeaderLen = 20
	IPv6HeaderLen = 40
	UDPHeaderLen  = 8
)

// MTU is the IBTA path MTU enumeration (IBTA Vol 1 §14.2.5.6): 1 = 256 bytes
// up to 5 = 4096 bytes; 0 is invalid.
type MTU uint8

// MTU values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size of m, or 0 if m is invalid.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of MTU256..MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the size in bytes as text, e.g. "1024".
func (m MTU) String() string {
	switch m {
	case MTU256:
		return "256"
	case MTU512:
		return "512"
	case MTU1024:
		return "1024"
	case MTU2048:
		return "2048"
	case MTU4096:
		return "4096"
	}
	return "invalid"
}

// MTUFromBytes returns the largest MTU not above n bytes, or 0 if n < 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// MTUForNetdev returns the active MTU rxe derives from a netdev MTU:
// MTUFromBytes(netdevMTU - 80). A 1500-byte netdev gives MTU1024.
func MTUForNetdev(netdevMTU int) MTU { return MTUFromBytes(netdevMTU - RxeMaxHdrOverhead) }

// SrcPortForQPN returns the UDP source port rxe uses for a QP that has no
// remote QPN yet: 0xC000 + hash_32(qpn, 14).
func SrcPortForQPN(qpn uint32) uint16 {
	return uint16(SrcPortBase + (qpn*0x61C88647)>>(32-14))
}

// SrcPortForFlow returns the UDP source port Linux ≥ 6.x rxe uses on a
// connected QP (rdma_get_udp_sport with flow label 0): the flow label is
// computed from the local and remote QPNs and folded into 14 bits.
func SrcPortForFlow(localQPN, remoteQPN uint32) uint16 {
	fl := uint64(localQPN) * uint64(remoteQPN)
	fl ^= fl >> 20
	fl ^= fl >> 40
	fl &= 0xFFFFF
	return uint16(SrcPortBase | (fl&0x3FFF ^ fl>>14))
}
