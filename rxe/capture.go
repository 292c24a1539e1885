package rxe

import (
	"io"
	"net/netip"
	"sync"
	"time"

	"softib/internal/pcap"
	"softib/internal/stats"
	"softib/udp"
	"softib/wire/roce"
)

// capturer writes DeviceConfig.Capture: one pcap record per RoCEv2
// packet, sent or received. The device's socket batches hide packet
// boundaries from tcpdump (a GSO send leaves as one super-packet, a GRO
// read arrives as one), but inside rxe every udp.Message is one packet,
// so capturing here shows them apart. The IP and UDP headers are
// synthesised (roce.Encap.AppendFrame) with the IPv4 ID the packet's
// ICRC covers, so a capture's ICRCs check out: 0 for what softib sends,
// the ID solved from the ICRC for what a kernel rxe peer sent.
//
// The TOS (IPv6 traffic class) and TTL (hop limit) are those the packet
// went on the wire with: for a sent packet its udp.Message's, which rxe
// takes from the QP's path or the UD work request's AH (tclass.go), a 0
// being the socket's TOS 0 and the kernel's default TTL 64 (RFC 1700's,
// Linux's ip_default_ttl). A received packet's TOS is the one the
// socket reported (IP_RECVTOS, on while the device runs congestion
// control; else 0); its TTL is not reported to rxe and is written as 64.
//
// The file header is the first Write; each record after it is exactly
// one Write, so that several devices can share a file (tools/devsel
// drops the later devices' headers).
//
// A device without a capture has a nil capturer: the data path pays one
// nil check per batch.
type capturer struct {
	w io.Writer

	mu    sync.Mutex // guards the fields below
	frame []byte     // the IP packet being written
	rec   []byte     // its pcap record
	enc   encapCache // headers of the last flow seen

	errs stats.Counter // records the writer failed to take
}

// defaultTTL is the TTL (hop limit) the kernel gives a datagram sent
// without one of its own (Linux's ip_default_ttl and IPv6 hop limit).
const defaultTTL = 64

func newCapturer(d *Device) (*capturer, error) {
	w := d.cfg.Capture
	if _, err := w.Write(pcap.AppendFileHeader(nil, pcap.LinkTypeRaw)); err != nil {
		return nil, err
	}
	const maxFrame = pktBufSize + roce.IPv6HeaderLen + roce.UDPHeaderLen
	return &capturer{w: w, frame: make([]byte, 0, maxFrame), rec: make([]byte, 0, maxFrame+32)}, nil
}

// sent records msgs, which left from src.
func (c *capturer) sent(src netip.AddrPort, msgs []udp.Message) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		c.write(now, src, m.Addr, m.Buf[:m.N], m.TOS, m.TTL, false)
	}
}

// rcvd records the datagrams of a receive batch that arrived at dst.
func (c *capturer) rcvd(dst netip.AddrPort, msgs []udp.Message) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		if m.N < 0 || m.N > len(m.Buf) {
			continue // truncated: the device drops it too
		}
		c.write(now, m.Addr, dst, m.Buf[:m.N], m.TOS, 0, true)
	}
}

// write appends one record (c.mu held); tos and ttl are the IP header's
// (0 TTL: the kernel default, 64).
func (c *capturer) write(now time.Time, src, dst netip.AddrPort, pkt []byte, tos, ttl uint8, rx bool) {
	e := c.enc.get(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()))
	if !c.enc.ok {
		c.errs.Inc()
		return
	}
	e.SetIPv4ID(0)
	if rx && !e.IsIPv6() {
		// A kernel rxe peer varies the ID; find the one its ICRC
		// covers (a packet whose ICRC is bad keeps 0 and shows as bad).
		if id, err := e.VerifyICRCAnyID(pkt); err == nil {
			e.SetIPv4ID(id)
		}
	}
	c.frame = e.AppendFrame(c.frame[:0], pkt)
	// The flow's cached headers carry no class: write the packet's over
	// them (the UDP checksum does not cover TOS or TTL).
	if ttl == 0 {
		ttl = defaultTTL
	}
	ec := e.Config()
	roce.PutIPHeader(c.frame, &roce.IPFields{Src: ec.Src.Addr(), Dst: ec.Dst.Addr(), TOS: tos, TTL: ttl,
		IPv4ID: ec.IPv4ID, NoDF: ec.NoDF, FlowLabel: ec.FlowLabel, Payload: len(c.frame) - e.HeaderLen() + roce.UDPHeaderLen})
	c.rec = pcap.AppendRecord(c.rec[:0], now, c.frame)
	if _, err := c.w.Write(c.rec); err != nil {
		c.errs.Inc()
	}
}
