//go:build linux

package rxe_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/pcap"
	"softib/internal/testenv"
	"softib/interop/vmtest"
	"softib/rxe"
	"softib/tools/pingpong"
	"softib/verbs"
	"softib/wire/roce"
)

// TestICRCInteropKernelRxe shows that verifying every ICRC (IPv4 included,
// the hidden IP ID solved for) accepts all of kernel rxe's traffic, whose
// IP IDs vary, and drops corrupted frames:
//
//  1. the guest's ibv_rc_pingpong (Linux 6.1 rdma_rxe) runs against a
//     softib rc_pingpong server with data checking; it must pass with
//     ICRCIPv4ID > 0 (non-zero IDs recovered) and ICRCErr == 0;
//  2. in the tap capture of that traffic, every guest→softib frame's ICRC
//     checked against the ID-0 template recovers exactly the ID in its
//     real IPv4 header, and the frame with one bit flipped is rejected
//     (apart from the 2^-16 class that is indistinguishable from another
//     ID, which must stay rare);
//  3. corrupted copies of those frames, re-addressed and sent to a live
//     softib UD QP, are dropped and counted in ICRCErr, while intact ones
//     (with random IDs) are accepted.
//
// It runs when SOFTIB_INTEROP_IMAGE names an image made by
// interop/image.sh; otherwise it returns at once.
func TestICRCInteropKernelRxe(t *testing.T) {
	ctx, v := vmtest.Boot(t, "ICRC interop with kernel rxe", "sibicrc", 6*time.Minute)
	if v == nil {
		return
	}
	testenv.RequireTool(t, "tcpdump")
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	pcapPath := filepath.Join(t.TempDir(), "icrc-guest.pcap")
	capt, err := v.Capture(ctx, pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Stop()

	dv := vmtest.OpenDevice(t, v.Namespace(), host)
	dev := dv.(*rxe.Device)
	var ln net.Listener
	inNetns(t, v.Namespace(), func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(host, pingpong.DefaultTCPPort).String())
		return err
	})
	t.Cleanup(func() { ln.Close() })

	// 1. Kernel rxe client, softib server, 4 KiB messages at path MTU
	// 1024: every message is four kernel packets (and ACKs).
	const iters = 500
	type result struct {
		res *pingpong.Result
		err error
	}
	srv := make(chan result, 1)
	var out strings.Builder
	go func() {
		r, err := pingpong.Run(ctx, dv, pingpong.Config{Kind: pingpong.RC, Listener: ln, GIDIndex: 1, Iters: iters, Size: 4096, Check: true, Out: &out})
		srv <- result{r, err}
	}()
	g, err := v.Run(ctx, "rc_pingpong", fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g 1 -n %d -s 4096 -c %s", iters, host), 3*time.Minute)
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	s := <-srv
	if g.Code != 0 || s.err != nil {
		t.Fatalf("guest rc %d: %s%s\nsoftib: %v\n%s", g.Code, g.Stdout, g.Stderr, s.err, out.String())
	}
	st := dev.Stats()
	t.Logf("softib rxe after rc_pingpong: ICRCIPv4ID %d, ICRCErr %d", st["ICRCIPv4ID"], st["ICRCErr"])
	if st["ICRCIPv4ID"] == 0 || st["ICRCErr"] != 0 {
		t.Fatalf("ICRCIPv4ID %d (want > 0), ICRCErr %d (want 0)", st["ICRCIPv4ID"], st["ICRCErr"])
	}

	// 2. The capture: IDs recovered exactly, corruption rejected.
	capt.Stop()
	frames := guestFrames(t, pcapPath, guest, host)
	if len(frames) < iters {
		t.Fatalf("%d guest→softib RoCE frames captured, want at least %d", len(frames), iters)
	}
	rnd := rand.New(rand.NewPCG(uint64(len(frames)), 7))
	ids, shaped := map[uint16]bool{}, 0
	for i, f := range frames {
		fr, err := roce.ParseFrame(f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if fr.VerifyICRC() != nil {
			t.Fatalf("frame %d: the kernel's ICRC does not verify with its own IP header", i)
		}
		realID := binary.BigEndian.Uint16(fr.IP[4:])
		ids[realID] = true
		e, err := roce.NewEncap(roce.EncapConfig{Src: fr.Src, Dst: fr.Dst})
		if err != nil {
			t.Fatal(err)
		}
		pkt := fr.Packet.Bytes()
		id, err := e.VerifyICRCAnyID(pkt)
		if err != nil || id != realID {
			t.Fatalf("frame %d: recovered ID %#x (%v), real %#x", i, id, err, realID)
		}
		// Flip one bit outside BTH byte 4 (masked out of the ICRC).
		c := append([]byte(nil), pkt...)
		j := rnd.IntN(len(c))
		if j == 4 {
			j = 5
		}
		c[j] ^= 1 << rnd.IntN(8)
		if id, err := e.VerifyICRCAnyID(c); err == nil {
			shaped++ // indistinguishable from ID id; must be rare
			if id == realID {
				t.Fatalf("frame %d: corruption accepted with the real ID", i)
			}
		}
	}
	t.Logf("%d guest frames, %d distinct IPv4 IDs, all recovered; %d of %d one-bit corruptions ID-shaped (accepted)",
		len(frames), len(ids), shaped, len(frames))
	if len(ids) < 2 {
		t.Errorf("kernel rxe sent %d distinct IP IDs; the test needs varying IDs", len(ids))
	}
	if shaped > len(frames)/100 {
		t.Errorf("%d of %d corrupted frames passed: more than the 2^-16 class explains", shaped, len(frames))
	}

	// 3. Live drops: the same packets re-addressed to a UD QP on the
	// device, from a socket in the guest's namespace; intact with a
	// random ID each, or with one bit flipped.
	ud := newEnd(t, dev, verbs.QPTypeUD, 1<<16)
	connect(t, ud, ud, connOpts{})
	var sock *net.UDPConn
	inNetns(t, v.Namespace(), func() (err error) {
		sock, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(host, 0)))
		return err
	})
	defer sock.Close()
	from := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	to := netip.AddrPortFrom(host, roce.UDPPort)
	const n = 64
	var good, bad int
	for i := range n {
		f, _ := roce.ParseFrame(frames[i%len(frames)])
		pay := f.Packet.Payload()
		if len(pay) > 1024 {
			pay = pay[:1024]
		}
		h := roce.Headers{BTH: roce.BTHFields{Opcode: roce.UDSendOnly, PKey: 0xFFFF, DestQP: ud.qp.QPN()},
			DETH: roce.DETHFields{QKey: 0x11111111, SrcQP: 0x99}}
		pkt := make([]byte, roce.PacketLen(roce.UDSendOnly, len(pay)))
		if _, err := roce.Build(pkt, &h, pay); err != nil {
			t.Fatal(err)
		}
		e, _ := roce.NewEncap(roce.EncapConfig{Src: from, Dst: to, IPv4ID: uint16(rnd.Uint32())})
		e.SetICRC(pkt)
		if i%2 == 1 {
			j := roce.BTHSize + rnd.IntN(len(pkt)-roce.BTHSize)
			pkt[j] ^= 1 << rnd.IntN(8)
			e0, _ := roce.NewEncap(roce.EncapConfig{Src: from, Dst: to})
			if _, err := e0.VerifyICRCAnyID(pkt); err == nil {
				continue // an ID-shaped corruption: not a drop test
			}
			bad++
		} else {
			good++
		}
		if _, err := sock.WriteToUDPAddrPort(pkt, to); err != nil {
			t.Fatal(err)
		}
	}
	want := st["ICRCErr"] + uint64(bad)
	deadline := time.Now().Add(10 * time.Second)
	for dev.Stats()["ICRCErr"] < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let stragglers land (a good one must not count)
	if got := dev.Stats()["ICRCErr"]; got != want {
		t.Fatalf("ICRCErr %d after %d corrupted and %d intact frames, want %d", got, bad, good, want)
	}
	t.Logf("live: %d corrupted frames dropped (ICRCErr), %d intact ones with random IDs accepted", bad, good)
}

// inNetns runs fn inside the named network namespace (netns.Run);
// sockets fn opens stay in it.
func inNetns(t *testing.T, ns string, fn func() error) {
	t.Helper()
	if err := netns.Run(ns, fn); err != nil {
		t.Fatal(err)
	}
}

// guestFrames returns the IPv4 packets (Ethernet stripped) of the RoCEv2
// frames from guest to host in an Ethernet pcap.
func guestFrames(t *testing.T, path string, guest, host netip.Addr) [][]byte {
	t.Helper()
	lt, recs, err := pcap.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lt != pcap.LinkTypeEthernet {
		t.Fatalf("link type %d", lt)
	}
	var out [][]byte
	for _, r := range recs {
		f := r.Data
		if len(f) < 14 || binary.BigEndian.Uint16(f[12:]) != pcap.EtherTypeIPv4 {
			continue
		}
		ip := f[14:]
		if len(ip) < roce.IPv4HeaderLen+roce.UDPHeaderLen || ip[0] != 0x45 || ip[9] != 17 ||
			binary.BigEndian.Uint16(ip[roce.IPv4HeaderLen+2:]) != roce.UDPPort {
			continue
		}
		fr, err := roce.ParseFrame(ip)
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if fr.Src.Addr() == guest && fr.Dst.Addr() == host {
			out = append(out, ip)
		}
	}
	return out
}
