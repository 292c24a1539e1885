package roce

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// Encap describes the IP and UDP headers that will carry RoCEv2 packets
// between two endpoints, as far as the ICRC covers them, so that a sender
// (or a receiver on an ordinary UDP socket, which never sees the IP header)
// can compute the ICRC without the real header. It holds a pre-masked
// header template and the CRC state over it with both length fields zero;
// computing an ICRC continues from that state (see ICRC), so it allocates
// nothing and does not run the CRC over the headers per packet. An Encap is immutable after
// NewEncap except through SetIPv4ID; it is safe for concurrent use as long
// as nobody calls SetIPv4ID concurrently.
type Encap struct {
	v6     bool
	cfg    EncapConfig
	prefix [v6BTH]byte // FF×8 ‖ masked IP ‖ UDP with masked checksum; length fields zero
	// hdrCRC is crc32.Update(0, IEEE, prefix up to the BTH): the CRC of
	// the per-peer constant part of the ICRC input, with the IP and UDP
	// length fields zero (ICRC adds their contribution per packet).
	hdrCRC uint32
}

// EncapConfig configures NewEncap.
type EncapConfig struct {
	// Src and Dst are the IP addresses and UDP ports. Both must be IPv4
	// (IPv4-mapped IPv6 counts as IPv4) or both IPv6. Dst's port is
	// normally UDPPort; a zero port means UDPPort.
	Src, Dst netip.AddrPort
	// IPv4ID is the IPv4 Identification the kernel will put on the wire.
	// An unconnected UDP socket with IP_MTU_DISCOVER=IP_PMTUDISC_DO sends
	// ID 0 with DF set, which is what the zero value describes.
	IPv4ID uint16
	// NoDF clears the IPv4 Don't Fragment flag (default: DF set).
	NoDF bool
	// TTL is the IPv4 TTL or IPv6 hop limit written by AppendFrame; 0
	// means 64. It is masked out of the ICRC.
	TTL uint8
	// TOS is the IPv4 TOS or IPv6 traffic class for AppendFrame (masked
	// out of the ICRC).
	TOS uint8
	// FlowLabel is the IPv6 flow label for AppendFrame (masked out of the
	// ICRC).
	FlowLabel uint32
}

// NewEncap validates c and precomputes the masked header template.
func NewEncap(c EncapConfig) (Encap, error) {
	src, dst := c.Src.Addr().Unmap(), c.Dst.Addr().Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return Encap{}, ErrBadAddress
	}
	if c.Dst.Port() == 0 {
		c.Dst = netip.AddrPortFrom(c.Dst.Addr(), UDPPort)
	}
	if c.TTL == 0 {
		c.TTL = 64
	}
	c.Src = netip.AddrPortFrom(src, c.Src.Port())
	c.Dst = netip.AddrPortFrom(dst, c.Dst.Port())
	e := Encap{v6: !src.Is4(), cfg: c}
	fillLRHMask(e.prefix[:])
	var udp []byte
	if e.v6 {
		ip := e.prefix[v6IP:v6UDP]
		ip[0] = 0x6F
		ip[1], ip[2], ip[3] = 0xFF, 0xFF, 0xFF
		ip[6] = 17 // UDP
		ip[7] = 0xFF
		s, d := src.As16(), dst.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		udp = e.prefix[v6UDP:]
	} else {
		ip := e.prefix[v4IP:v4UDP]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[4:], c.IPv4ID)
		if !c.NoDF {
			ip[6] = 0x40
		}
		ip[9] = 17 // UDP
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		maskIPv4(ip)
		udp = e.prefix[v4UDP:]
	}
	binary.BigEndian.PutUint16(udp[0:], c.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], c.Dst.Port())
	udp[6], udp[7] = 0xFF, 0xFF
	e.setHdrCRC()
	return e, nil
}

// setHdrCRC recomputes hdrCRC after the template changed.
func (e *Encap) setHdrCRC() {
	if e.v6 {
		e.hdrCRC = crcSlicing8(0, e.prefix[:v6BTH])
		return
	}
	e.hdrCRC = crcSlicing8(0, e.prefix[:v4BTH])
}

// Config returns the configuration (with defaults filled in).
func (e *Encap) Config() EncapConfig { return e.cfg }

// IsIPv6 reports whether the packets travel over IPv6.
func (e *Encap) IsIPv6() bool { return e.v6 }

// SetIPv4ID changes the IPv4 Identification the ICRC assumes.
func (e *Encap) SetIPv4ID(id uint16) {
	e.cfg.IPv4ID = id
	binary.BigEndian.PutUint16(e.prefix[v4IP+4:], id)
	e.setHdrCRC()
}

// HeaderLen returns the IP + UDP header length in front of each packet.
func (e *Encap) HeaderLen() int {
	if e.v6 {
		return IPv6HeaderLen + UDPHeaderLen
	}
	return IPv4HeaderLen + UDPHeaderLen
}

// ICRC returns the ICRC of pkt, a RoCEv2 UDP payload (BTH through the
// 4-byte ICRC trailer, whose contents are ignored). It returns 0 if pkt is
// shorter than BTH + ICRC.
//
// The CRC over FF×8 ‖ IP header ‖ UDP header is not run per packet: the
// only fields there that vary between packets of one Encap are the IP
// total (IPv6 payload) length and the UDP length, and CRC-32 is affine
// over GF(2), so the CRC of the headers with their real lengths is
// hdrCRC (lengths zero) XOR the contribution of each length byte, which
// depends only on the byte and on how many bytes follow it in the
// headers (lenContrib, tabled). The BTH is then taken from pkt directly
// with its byte 4 (FECN, BECN, reserved) read as all ones, and the rest
// of the packet goes through hash/crc32. ICRCv4/ICRCv6 compute the same
// value the straightforward way from real headers; the tests compare the
// two over lengths, addresses, IDs and contents.
func (e *Encap) ICRC(pkt []byte) uint32 {
	if len(pkt) < MinPacketLen {
		return 0
	}
	udpLen := uint16(UDPHeaderLen + len(pkt))
	crc := e.hdrCRC ^ lenContrib(udpLen, lenUDP)
	if e.v6 {
		crc ^= lenContrib(udpLen, lenIPv6) // payload length
	} else {
		crc ^= lenContrib(IPv4HeaderLen+udpLen, lenIPv4) // total length
	}
	crc = crcBTH(crc, pkt)
	rest := pkt[BTHSize : len(pkt)-ICRCSize]
	if len(rest) >= crcCLMULMin {
		// hash/crc32 folds whole 16-byte blocks with PCLMULQDQ/PMULL
		// from 64 bytes on, but takes a tail shorter than 16 bytes (and
		// anything shorter than 64) byte by byte after at most one
		// slicing-by-8 pass; crcSlicing8 does those 8 at a time.
		do := len(rest) &^ 15
		crc = crc32.Update(crc, crc32.IEEETable, rest[:do])
		rest = rest[do:]
	}
	return crcSlicing8(crc, rest)
}

// crcCLMULMin is the length from which hash/crc32 uses its carry-less
// multiply kernel on amd64 (and arm64).
const crcCLMULMin = 64

// SetICRC computes the ICRC of pkt and stores it in pkt's last 4 bytes
// (little-endian, as rxe does). pkt must be at least MinPacketLen long
// (Build's result always is); shorter input is left untouched.
func (e *Encap) SetICRC(pkt []byte) {
	if len(pkt) >= MinPacketLen {
		putICRC(pkt, e.ICRC(pkt))
	}
}

// VerifyICRC checks pkt's ICRC trailer. It returns nil, ErrTruncated or
// ErrBadICRC.
func (e *Encap) VerifyICRC(pkt []byte) error {
	if len(pkt) < MinPacketLen {
		return ErrTruncated
	}
	if binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCSize:]) != e.ICRC(pkt) {
		return ErrBadICRC
	}
	return nil
}

// ICRCFor returns the ICRC of pkt (BTH through the 4-byte ICRC slot) sent
// from src to dst by an unconnected UDP socket with DF forced (IPv4 ID 0,
// DF set), without a long-lived Encap. It returns 0 if the addresses are
// invalid or of different families. For many packets to one destination,
// keep an Encap instead; this costs one template fill per call.
func ICRCFor(src, dst netip.AddrPort, pkt []byte) uint32 {
	e, err := NewEncap(EncapConfig{Src: src, Dst: dst})
	if err != nil {
		return 0
	}
	return e.ICRC(pkt)
}
