package mad

import (
	"fmt"
	"net/netip"
)

// PortSpace is an RDMA CM port space (linux rdma_cm.h enum rdma_ucm_port_space;
// ib-cm.md §8.1).
type PortSpace uint16

// Port spaces.
const (
	PSIPoIB PortSpace = 0x0002
	PSTCP   PortSpace = 0x0106
	PSUDP   PortSpace = 0x0111
	PSIB    PortSpace = 0x013F
)

// String names the port space.
func (p PortSpace) String() string {
	switch p {
	case PSIPoIB:
		return "IPoIB"
	case PSTCP:
		return "TCP"
	case PSUDP:
		return "UDP"
	case PSIB:
		return "IB"
	}
	return fmt.Sprintf("PortSpace(%#04x)", uint16(p))
}

// RDMA CM service-ID range (linux cma.c IB_CMA_SERVICE_ID and its mask).
const (
	// CMAServiceID is the prefix of every RDMA CM service ID.
	CMAServiceID uint64 = 0x0000000001000000
	// CMAServiceIDMask selects the prefix bits.
	CMAServiceIDMask uint64 = 0xFFFFFFFFFF000000
)

// ServiceID returns the IB service ID RDMA CM uses for a port space and
// port: (ps << 16) + port, e.g. TCP port 7174 → 0x0000000001061C06.
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 + uint64(port)
}

// ParseServiceID splits an RDMA CM service ID into port space and port.
// ok is false when sid is outside the RDMA CM range.
func ParseServiceID(sid uint64) (ps PortSpace, port uint16, ok bool) {
	if sid&CMAServiceIDMask != CMAServiceID {
		return 0, 0, false
	}
	return PortSpace(sid >> 16 & 0xFFFF), uint16(sid), true
}

// RDMA CM constants (linux cma.c; ib-cm.md §8.5).
const (
	// CMAHdrSize is the size of the cma_hdr at the start of REQ and
	// SIDR_REQ private data.
	CMAHdrSize = 36
	// CMAVersion is the only cma_hdr version.
	CMAVersion = 0
	// CMAResponseTimeout is CMA_CM_RESPONSE_TIMEOUT, used for both CM
	// response timeouts in REQs.
	CMAResponseTimeout Timeout = 20
	// CMAMaxCMRetries is CMA_MAX_CM_RETRIES.
	CMAMaxCMRetries = 15
	// CMAIBoEPacketLifeTime is CMA_IBOE_PACKET_LIFETIME of newer kernels.
	CMAIBoEPacketLifeTime Timeout = 16
	// RDMAUDPQKey is RDMA_UDP_QKEY, the Q_Key of RDMA_PS_UDP/IB UD QPs.
	RDMAUDPQKey uint32 = 0x01234567
)

// Private-data limits for RDMA CM users (ib-cm.md §8.4).
const (
	// ConnectPrivateDataMax is the rdma_connect limit (REQ 92 − cma_hdr).
	ConnectPrivateDataMax = REQPrivateDataSize - CMAHdrSize
	// AcceptPrivateDataMax is the rdma_accept limit (REP).
	AcceptPrivateDataMax = REPPrivateDataSize
	// RejectPrivateDataMax is the rdma_reject limit (REJ).
	RejectPrivateDataMax = REJPrivateDataSize
	// UDResolvePrivateDataMax is the UD resolve limit (SIDR_REQ 216 − cma_hdr).
	UDResolvePrivateDataMax = SIDRREQPrivateDataSize - CMAHdrSize
)

// Field table of the cma_hdr (ib-cm.md §8.3).
var (
	cmaVersion   = Field{"CMAVersion", 0, 0, 8}
	cmaIPVersion = Field{"IPVersion", 1, 0, 4}
	cmaSrcPort   = Field{"SrcPort", 2, 0, 16}
	cmaSrcAddr   = Field{"SrcAddr", 4, 0, 128}
	cmaDstAddr   = Field{"DstAddr", 20, 0, 128}

	cmaHdrLayout = Layout{Name: "cma_hdr", Size: CMAHdrSize, Fields: []Field{
		cmaVersion, cmaIPVersion, cmaSrcPort, cmaSrcAddr, cmaDstAddr}}
)

// CMAHdrLayout returns a copy of the cma_hdr field table.
func CMAHdrLayout() Layout {
	c := cmaHdrLayout
	c.Fields = append([]Field(nil), cmaHdrLayout.Fields...)
	return c
}

// CMAHdr is the 36-byte RDMA CM header that starts REQ and SIDR_REQ
// private data. The destination port is not here: it is in the service
// ID.
type CMAHdr struct {
	Version uint8 // CMAVersion
	SrcPort uint16
	Src     netip.Addr // IPv4 or IPv6; both must be of the same family
	Dst     netip.Addr
}

// IPVersion returns 4 or 6 from the source address family.
func (h *CMAHdr) IPVersion() uint8 {
	if h.Src.Unmap().Is4() {
		return 4
	}
	return 6
}

// Len returns [CMAHdrSize].
func (h *CMAHdr) Len() int { return CMAHdrSize }

// Append appends the encoded header. IPv4 addresses go into the last 4
// bytes of their 16-byte fields with 12 zero bytes before them (not the
// ::ffff: mapped form).
func (h *CMAHdr) Append(b []byte) []byte {
	b, d := grow(b, CMAHdrSize)
	cmaVersion.Set(d, uint64(h.Version))
	ipv := h.IPVersion()
	cmaIPVersion.Set(d, uint64(ipv))
	cmaSrcPort.Set(d, uint64(h.SrcPort))
	putCMAAddr(cmaSrcAddr.Bytes(d), h.Src, ipv)
	putCMAAddr(cmaDstAddr.Bytes(d), h.Dst, ipv)
	return b
}

func putCMAAddr(d []byte, a netip.Addr, ipv uint8) {
	if ipv == 4 {
		v4 := a.Unmap().As4()
		copy(d[12:], v4[:])
		return
	}
	v6 := a.As16()
	copy(d, v6[:])
}

// Decode parses a cma_hdr from the start of private data.
func (h *CMAHdr) Decode(d []byte) error {
	if len(d) < CMAHdrSize {
		return fmt.Errorf("mad: cma_hdr %d bytes: %w", len(d), ErrTooShort)
	}
	h.Version = uint8(cmaVersion.Get(d))
	h.SrcPort = uint16(cmaSrcPort.Get(d))
	src, dst := cmaSrcAddr.Bytes(d), cmaDstAddr.Bytes(d)
	switch cmaIPVersion.Get(d) {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(src[12:16]))
		h.Dst = netip.AddrFrom4([4]byte(dst[12:16]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(src))
		h.Dst = netip.AddrFrom16([16]byte(dst))
		// An IPv4-mapped address under ip_version 6 has no encoding of
		// its own: Append writes an IPv4 source as ip_version 4, so a
		// mapped source (or a mapped destination beside a native
		// source) would not re-encode to what was received.
		if h.Src.Is4In6() || h.Dst.Is4In6() {
			return fmt.Errorf("mad: cma_hdr ip_version 6 with IPv4-mapped address: %w", ErrBadAddress)
		}
	default:
		return fmt.Errorf("mad: cma_hdr IP version %d: %w", cmaIPVersion.Get(d), ErrBadAddress)
	}
	return nil
}
