package udp_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/netns"
	"softib/udp"
)

// capture opens an AF_PACKET socket on dev in the current namespace that
// yields IPv4 packets (from the IP header on).
func capture(dev string) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return -1, err
	}
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	// Hang guard only: a read that times out fails the test.
	tv := unix.NsecToTimeval(int64(10 * time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestIPv4WireHeader checks on a real link what the RoCEv2 ICRC depends
// on: every IPv4 datagram leaves with DF set and IP ID 0, one IP packet
// per datagram (no GSO towards a non-loopback peer by default), with the
// configured TOS and TTL.
func TestIPv4WireHeader(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{MTU: 9000, NoIPv6: true})
	var fd int
	if err := p.B.Do(func() (err error) { fd, err = capture(p.B.Dev); return err }); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var tx *udp.Socket
	cfg := &udp.Config{TOS: 0x28, TTL: 33}
	if err := p.A.Do(func() (err error) { tx, err = udp.Listen(netip.AddrPortFrom(p.A.Addr, 0), cfg); return err }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	dst := netip.AddrPortFrom(p.B.Addr, 4791)
	const n = 20
	msgs := make([]udp.Message, n)
	for i := range msgs {
		msgs[i] = udp.Message{Buf: make([]byte, 4200), N: 4200, Addr: dst}
	}
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 70000)
	for seen := 0; seen < n; {
		k, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("capture after %d packets: %v", seen, err)
		}
		ip := buf[:k]
		if len(ip) < 28 || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP || binary.BigEndian.Uint16(ip[22:]) != 4791 {
			continue // ARP-triggered or unrelated traffic
		}
		seen++
		id := binary.BigEndian.Uint16(ip[4:])
		flags := binary.BigEndian.Uint16(ip[6:])
		total := binary.BigEndian.Uint16(ip[2:])
		if id != 0 || flags != 0x4000 || ip[1] != 0x28 || ip[8] != 33 || total != 20+8+4200 {
			t.Fatalf("packet %d: id %d flags/frag %#x tos %#x ttl %d length %d; want id 0, DF, tos 0x28, ttl 33, length 4228",
				seen, id, flags, ip[1], ip[8], total)
		}
	}
}

// TestOversizeKeepsGSO sends a GSO run of datagrams above the link MTU:
// the send must fail with EMSGSIZE (DF, no fragmentation), and since the
// datagrams fail without GSO as well, GSO must stay on.
func TestOversizeKeepsGSO(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{MTU: 1500})
	var tx *udp.Socket
	if err := p.A.Do(func() (err error) { tx, err = udp.Listen(netip.AddrPortFrom(p.A.Addr6, 0), nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	dst := netip.AddrPortFrom(p.B.Addr6, 4791)
	msgs := make([]udp.Message, 4)
	for i := range msgs {
		msgs[i] = udp.Message{Buf: make([]byte, 2000), N: 2000, Addr: dst}
	}
	n, err := tx.WriteBatch(msgs)
	if n != 0 || !errors.Is(err, unix.EMSGSIZE) {
		t.Fatalf("WriteBatch = %d, %v; want 0, EMSGSIZE", n, err)
	}
	if gso, _ := tx.Offloads(); !gso || tx.GSODisabled() != nil {
		t.Fatalf("GSO switched off: %v", tx.GSODisabled())
	}
	// Datagrams that fit still go out with GSO.
	for i := range msgs {
		msgs[i].N = 1000
	}
	if n, err := tx.WriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
}
