package netemu

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
)

var (
	macA  = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macRA = net.HardwareAddr{2, 0, 0, 0, 0, 0xa}
	macRB = net.HardwareAddr{2, 0, 0, 0, 0, 0xb}
	macB  = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	ip4A  = netip.MustParseAddr("10.231.0.1")
	ip4B  = netip.MustParseAddr("10.232.0.1")
	ip6A  = netip.MustParseAddr("fd00:231::1")
	ip6B  = netip.MustParseAddr("fd00:232::1")
)

// capture is a sender that keeps copies of what it sends.
type capture struct{ frames [][]byte }

func (c *capture) send(b []byte) error {
	c.frames = append(c.frames, append([]byte(nil), b...))
	return nil
}

// newTestForwarder returns the A→B forwarder of a router with MTU
// 1500, sending into tx.
func newTestForwarder(tx sender, seed uint64) *forwarder {
	l := newLane(tx, newPacketPool(vnetLen+ethLen+1500), seed, AtoB)
	return newForwarder(l, macRA, macRB, macB,
		netip.MustParsePrefix("10.232.0.0/24"), netip.MustParsePrefix("fd00:232::/64"), 1500)
}

// frameSpec describes a test frame as the router's socket reads it.
type frameSpec struct {
	v6       bool
	proto    uint8
	ttl      uint8
	dst      netip.Addr // default B's address
	payload  []byte
	tcpFlags uint8
	partial  bool // leave the L4 checksum partial (pseudo-header only), NEEDS_CSUM
	gso      int  // gso_size; 0: none
}

// build makes an Ethernet frame from A to the router with a virtio
// header in front, L4 checksum complete unless partial.
func build(s frameSpec) []byte {
	if s.ttl == 0 {
		s.ttl = 64
	}
	src, dst := ip4A, ip4B
	if s.v6 {
		src, dst = ip6A, ip6B
	}
	if s.dst.IsValid() {
		dst = s.dst
	}
	l4len := 8
	if s.proto == protoTCP {
		l4len = 20
	}
	l4len += len(s.payload)
	b := make([]byte, vnetLen, 2000+len(s.payload))
	b = append(b, macRA...)
	b = append(b, macA...)
	if s.v6 {
		b = binary.BigEndian.AppendUint16(b, etherTypeIPv6)
		b = append(b, 0x60, 0, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(l4len))
		b = append(b, s.proto, s.ttl)
		b = append(b, src.AsSlice()...)
		b = append(b, dst.AsSlice()...)
	} else {
		b = binary.BigEndian.AppendUint16(b, etherTypeIPv4)
		l3 := len(b)
		b = append(b, 0x45, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(20+l4len))
		b = append(b, 0x12, 0x34, 0x40, 0, s.ttl, s.proto, 0, 0)
		b = append(b, src.AsSlice()...)
		b = append(b, dst.AsSlice()...)
		setIPv4Csum(b[l3:])
	}
	l4 := len(b)
	if s.proto == protoTCP {
		b = append(b, 0x30, 0x39, 0x13, 0x88, 0x10, 0, 0, 0, 0, 0, 0, 1, 0x50, s.tcpFlags|0x10, 0xff, 0xff, 0, 0, 0, 0)
	} else {
		b = append(b, 0x30, 0x39, 0x12, 0xb7)
		b = binary.BigEndian.AppendUint16(b, uint16(l4len))
		b = append(b, 0, 0)
	}
	b = append(b, s.payload...)
	f := b[vnetLen:]
	if s.partial || s.gso > 0 {
		off := 16
		if s.proto == protoUDP {
			off = 6
		}
		binary.BigEndian.PutUint16(f[l4-vnetLen+off:], fold(pseudoSum(f, s.v6, s.proto, l4len)))
		b[0] = vnetNeedsCsum
		binary.NativeEndian.PutUint16(b[6:], uint16(l4-vnetLen))
		binary.NativeEndian.PutUint16(b[8:], uint16(off))
	} else {
		setL4Csum(f, s.v6, s.proto, l4-vnetLen, len(f))
	}
	if s.gso > 0 {
		switch {
		case s.proto == protoUDP:
			b[1] = gsoUDPL4
		case s.v6:
			b[1] = gsoTCPv6
		default:
			b[1] = gsoTCPv4
		}
		binary.NativeEndian.PutUint16(b[2:], uint16(l4-vnetLen+l4len-len(s.payload)))
		binary.NativeEndian.PutUint16(b[4:], uint16(s.gso))
	}
	return b
}

// csum16 is an independent, plain RFC 1071 checksum for checking.
func csum16(parts ...[]byte) uint16 {
	var s uint32
	for _, p := range parts {
		for i := 0; i+1 < len(p); i += 2 {
			s += uint32(p[i])<<8 | uint32(p[i+1])
		}
		if len(p)%2 == 1 {
			s += uint32(p[len(p)-1]) << 8
		}
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checkFrame checks an output frame: MACs, TTL, header and L4
// checksums. It returns the parsed packet.
func checkFrame(t *testing.T, b []byte, wantTTL uint8) ipPacket {
	t.Helper()
	if !bytes.Equal(b[:vnetLen], make([]byte, vnetLen)) {
		t.Fatalf("virtio header not zero: % x", b[:vnetLen])
	}
	f := b[vnetLen:]
	if !bytes.Equal(f[:6], macB) || !bytes.Equal(f[6:12], macRB) {
		t.Fatalf("MACs %v → %v", net.HardwareAddr(f[6:12]), net.HardwareAddr(f[:6]))
	}
	p, ok := parseIP(f)
	if !ok || p.end != len(f) {
		t.Fatalf("bad IP packet: %+v %v, len %d", p, ok, len(f))
	}
	if len(f)-ethLen > 1500 {
		t.Fatalf("packet of %d bytes exceeds the MTU", len(f)-ethLen)
	}
	ip := f[ethLen:]
	var pseudo []byte
	l4len := p.end - p.l4
	if p.v6 {
		if ip[7] != wantTTL {
			t.Fatalf("hop limit %d, want %d", ip[7], wantTTL)
		}
		pseudo = append(append([]byte(nil), ip[8:40]...), 0, 0, byte(l4len>>8), byte(l4len), 0, 0, 0, p.proto)
	} else {
		if ip[8] != wantTTL {
			t.Fatalf("TTL %d, want %d", ip[8], wantTTL)
		}
		if c := csum16(ip[:p.l4-ethLen]); c != 0xffff {
			t.Fatalf("IPv4 header checksum wrong (sum %#x)", c)
		}
		pseudo = append(append([]byte(nil), ip[12:20]...), 0, p.proto, byte(l4len>>8), byte(l4len))
	}
	if c := csum16(pseudo, f[p.l4:p.end]); c != 0xffff {
		t.Fatalf("L4 checksum wrong (sum %#x)", c)
	}
	return p
}

func seqPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

func TestForwardPlain(t *testing.T) {
	for _, s := range []frameSpec{
		{proto: protoUDP, payload: seqPayload(100)},
		{proto: protoUDP, payload: seqPayload(1472), partial: true},
		{proto: protoTCP, payload: seqPayload(1000), partial: true},
		{v6: true, proto: protoUDP, payload: seqPayload(1452), partial: true},
		{v6: true, proto: protoTCP, payload: seqPayload(3)},
	} {
		var c capture
		fw := newTestForwarder(&c, 1)
		in := build(s)
		fw.handle(in)
		if len(c.frames) != 1 {
			t.Fatalf("%+v: %d frames out", s, len(c.frames))
		}
		p := checkFrame(t, c.frames[0], 63)
		hl := 8
		if s.proto == protoTCP {
			hl = 20
		}
		if got := c.frames[0][vnetLen+p.l4+hl:]; !bytes.Equal(got, s.payload) {
			t.Fatalf("%+v: payload changed", s)
		}
	}
}

func TestForwardGSO(t *testing.T) {
	for _, s := range []frameSpec{
		{proto: protoTCP, payload: seqPayload(5000), gso: 1448, tcpFlags: tcpFIN | tcpPSH | tcpCWR},
		{v6: true, proto: protoTCP, payload: seqPayload(4000), gso: 1000, tcpFlags: tcpPSH | tcpCWR},
		{proto: protoUDP, payload: seqPayload(3000), gso: 1472},
		{v6: true, proto: protoUDP, payload: seqPayload(2500), gso: 1000},
	} {
		var c capture
		fw := newTestForwarder(&c, 1)
		fw.handle(build(s))
		want := (len(s.payload) + s.gso - 1) / s.gso
		if len(c.frames) != want || fw.c.Segmented.Load() != 1 || fw.c.Received.Load() != uint64(want) {
			t.Fatalf("%+v: %d frames out, want %d; segmented %d", s, len(c.frames), want, fw.c.Segmented.Load())
		}
		var payload []byte
		var ids []uint16
		for i, b := range c.frames {
			p := checkFrame(t, b, 63)
			f := b[vnetLen:]
			hl := 8
			if s.proto == protoTCP {
				hl = 20
				seq := binary.BigEndian.Uint32(f[p.l4+4:])
				if seq != uint32(0x10000000+i*s.gso) {
					t.Fatalf("segment %d: seq %#x", i, seq)
				}
				flags, last := f[p.l4+13], i == want-1
				if (flags&tcpFIN != 0) != (last && s.tcpFlags&tcpFIN != 0) ||
					(flags&tcpPSH != 0) != (last && s.tcpFlags&tcpPSH != 0) ||
					(flags&tcpCWR != 0) != (i == 0 && s.tcpFlags&tcpCWR != 0) {
					t.Fatalf("segment %d of %d: flags %#x", i, want, flags)
				}
			} else if ul := binary.BigEndian.Uint16(f[p.l4+4:]); int(ul) != p.end-p.l4 {
				t.Fatalf("segment %d: UDP length %d", i, ul)
			}
			if !p.v6 {
				ids = append(ids, binary.BigEndian.Uint16(f[ethLen+4:]))
			}
			payload = append(payload, f[p.l4+hl:]...)
		}
		if !bytes.Equal(payload, s.payload) {
			t.Fatalf("%+v: payload not reassembled intact", s)
		}
		for i, id := range ids {
			if id != 0x1234+uint16(i) {
				t.Fatalf("segment %d: IP ID %#x", i, id)
			}
		}
	}
}

func TestForwardDrops(t *testing.T) {
	udp := frameSpec{proto: protoUDP, payload: seqPayload(10)}
	ttl1 := udp
	ttl1.ttl = 1
	other := udp
	other.dst = netip.MustParseAddr("10.9.9.9")
	arp := build(udp)
	arp[vnetLen+12], arp[vnetLen+13] = 0x08, 0x06
	notMine := build(udp)
	copy(notMine[vnetLen:], macB)
	short := build(udp)
	short = short[:len(short)-1] // IP total length beyond the frame
	badGSO := build(frameSpec{proto: protoUDP, payload: seqPayload(2000), gso: 1472})
	badGSO[1] = gsoUDP // UFO, which veth never produces
	big := build(frameSpec{proto: protoUDP, payload: seqPayload(1600)})

	var c capture
	fw := newTestForwarder(&c, 1)
	for _, b := range [][]byte{build(ttl1), build(other), arp, notMine, short, badGSO, big, {1, 2, 3}} {
		fw.handle(b)
	}
	got := fw.c.snapshot()
	want := DirStats{Received: 0, TTLExpired: 1, NoRoute: 1, Ignored: 2, Malformed: 4}
	if got != want || len(c.frames) != 0 {
		t.Fatalf("counters %+v, want %+v; %d frames out", got, want, len(c.frames))
	}
}

func TestFilter(t *testing.T) {
	udp4791 := flow{proto: protoUDP, src: 1000, dst: 4791, ports: true}
	tcp := flow{proto: protoTCP, src: 988, dst: 1021, ports: true}
	frag := flow{proto: protoUDP}
	for _, c := range []struct {
		f    Filter
		fl   flow
		want bool
	}{
		{Filter{}, tcp, true},
		{Filter{}, frag, true},
		{Filter{Proto: protoUDP}, udp4791, true},
		{Filter{Proto: protoUDP}, tcp, false},
		{Filter{Port: 4791}, udp4791, true},
		{Filter{Port: 988}, tcp, true},
		{Filter{Port: 4791}, frag, false},
		{Filter{Proto: protoTCP, Port: 4791}, udp4791, false},
	} {
		if got := c.f.matches(c.fl); got != c.want {
			t.Errorf("%+v matches %+v = %v", c.f, c.fl, got)
		}
	}
}

func TestGateway(t *testing.T) {
	for _, c := range []struct{ p, want string }{
		{"10.231.0.1/24", "10.231.0.254"},
		{"10.1.2.3/16", "10.1.255.254"},
		{"fd00:231::1/64", "fd00:231::ffff:ffff:ffff:fffe"},
		{"10.0.0.1/31", ""},
	} {
		got := gateway(netip.MustParsePrefix(c.p))
		if (c.want == "" && got.IsValid()) || (c.want != "" && got != netip.MustParseAddr(c.want)) {
			t.Errorf("gateway(%s) = %v, want %q", c.p, got, c.want)
		}
	}
}

// FuzzHandle feeds arbitrary frames to the forwarder: it must never
// panic, and whatever it sends must be a well-formed IP packet within
// the MTU, with a decremented TTL and valid checksums.
func FuzzHandle(f *testing.F) {
	for _, s := range []frameSpec{
		{proto: protoUDP, payload: seqPayload(100)},
		{proto: protoTCP, payload: seqPayload(1000), partial: true},
		{v6: true, proto: protoUDP, payload: seqPayload(500), partial: true},
		{proto: protoTCP, payload: seqPayload(3000), gso: 1448, tcpFlags: tcpFIN},
		{v6: true, proto: protoUDP, payload: seqPayload(2100), gso: 1000},
	} {
		f.Add(build(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c capture
		fw := newTestForwarder(&c, 1)
		in := append([]byte(nil), b...)
		fw.handle(in)
		for _, out := range c.frames {
			fr := out[vnetLen:]
			p, ok := parseIP(fr)
			if !ok || p.end != len(fr) || len(fr)-ethLen > 1500 {
				t.Fatalf("bad output frame % x", out)
			}
			if !bytes.Equal(fr[:6], macB) {
				t.Fatalf("output not addressed to B")
			}
		}
	})
}
