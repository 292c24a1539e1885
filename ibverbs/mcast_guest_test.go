//go:build ibverbs && linux && cgo

package ibverbs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"softib/ibverbs"
	"softib/internal/verbstest"
	"softib/verbs"
)

// TestMcastGuest is the guest half of TestInteropIBVerbs' multicast
// subtest: a UD QP of this provider on the kernel's rxe0 is attached
// (ibv_attach_mcast) to group G1 and receives what softib's pure-Go
// device on the host sends to it, with the IPv4 header Linux rxe puts in
// the GRH area; once detached (ibv_detach_mcast) it gets no more of the
// group's datagrams (a unicast datagram sent after them is the next
// completion); then it sends to group G2, where the host's QP listens.
// The host drives the steps over a TCP connection, one line each.
//
// ibv_attach_mcast on Linux rxe only adds a link-layer filter (computed
// as for an IPv6 group even for an IPv4-mapped MGID); the IP group
// membership that makes the kernel accept the datagrams comes from the
// RDMA CM's join (cma_igmp_send), so this test joins the IPv4 group on
// the interface itself, as rdma_join_multicast would.
func TestMcastGuest(t *testing.T) {
	ctl := os.Getenv(EnvMcastCtl)
	if ctl == "" {
		t.Skipf("set %s (TestInteropIBVerbs runs this in the guest)", EnvMcastCtl)
	}
	c, err := net.DialTimeout("tcp", ctl, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	r := bufio.NewReader(c)
	expect := func(word string) []string {
		t.Helper()
		line, err := r.ReadString('\n')
		f := strings.Fields(line)
		if err != nil || len(f) == 0 || f[0] != word {
			t.Fatalf("control: got %q (%v), want %s", line, err, word)
		}
		return f[1:]
	}
	say := func(format string, args ...any) {
		t.Helper()
		if _, err := fmt.Fprintf(c, format+"\n", args...); err != nil {
			t.Fatal(err)
		}
	}
	cfg := expect("groups")
	var g1, g2, hostIP netip.Addr
	var n, size int
	if len(cfg) != 5 {
		t.Fatalf("groups line %q", cfg)
	}
	g1, g2, hostIP = netip.MustParseAddr(cfg[0]), netip.MustParseAddr(cfg[1]), netip.MustParseAddr(cfg[2])
	fmt.Sscan(cfg[3], &n)
	fmt.Sscan(cfg[4], &size)
	guestIP := netip.MustParseAddrPort(c.LocalAddr().String()).Addr().Unmap()

	dev, err := verbs.Open(verbs.DeviceConfig{Provider: ibverbs.ProviderName, Name: os.Getenv(EnvDevice)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	tbl, err := dev.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	sgid := -1
	for _, e := range tbl {
		if e.Type == verbs.GIDTypeRoCEv2 && e.GID == verbs.GIDFromAddr(guestIP) {
			sgid = e.Index
		}
	}
	if sgid < 0 {
		t.Fatalf("no RoCE v2 GID for %v in %v", guestIP, tbl)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(verbs.CQAttr{CQE: 2*n + 8})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: n + 4, MaxRecvWR: n + 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: mcastQKey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := qp.Modify(&st.a, st.m); err != nil {
			t.Fatal(err)
		}
	}
	slot := 40 + size
	buf := make([]byte, (2*n+2)*slot)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for k := range n + 1 {
		if _, err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(k), SGL: []verbs.SGE{mr.SGE(k*slot, slot)}}}); err != nil {
			t.Fatal(err)
		}
	}
	mg1 := verbs.GIDFromAddr(g1)
	if err := verbs.AttachMcast(qp, mg1, 0); err != nil {
		t.Fatal(err)
	}
	ifi := ifaceOf(t, guestIP)
	ipg, err := net.ListenMulticastUDP("udp4", ifi, &net.UDPAddr{IP: g1.AsSlice(), Port: 4792})
	if err != nil {
		t.Fatalf("IP join of %v on %s: %v", g1, ifi.Name, err)
	}
	defer ipg.Close()
	say("ready %d", qp.QPN())

	expect("sent")
	h4, g4 := hostIP.As4(), g1.As4()
	for k, wc := range verbstest.WaitWC(t, cq, n) {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID != uint64(k) || wc.ByteLen != uint32(slot) || wc.Flags&verbs.WCFlagGRH == 0 {
			t.Fatalf("receive %d: %+v", k, wc)
		}
		m := buf[k*slot : (k+1)*slot]
		if ip := m[20:40]; m[20]>>4 != 4 || !bytes.Equal(ip[12:16], h4[:]) || !bytes.Equal(ip[16:20], g4[:]) {
			t.Fatalf("receive %d: GRH area % x, want the IPv4 header %v -> %v", k, m[:40], hostIP, g1)
		}
		for i, b := range m[40:] {
			if b != mcastPayload(1, k, i) {
				t.Fatalf("receive %d: byte %d is %#x, want %#x", k, i, b, mcastPayload(1, k, i))
			}
		}
	}
	t.Logf("%d datagrams from the host's softib device received through ibv_attach_mcast; GRH area dst %v", n, g1)
	if err := verbs.DetachMcast(qp, mg1, 0); err != nil {
		t.Fatal(err)
	}
	say("detached")
	expect("fenced")
	if wc := verbstest.WaitOne(t, cq); wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCFlagWithImm == 0 || wc.ImmData != 0xFE {
		t.Fatalf("after detach the next completion is %+v, want the unicast datagram with immediate 0xFE (a group datagram reached the detached QP)", wc)
	}

	ah, err := pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(g2), SGIDIndex: uint8(sgid), HopLimit: 8}})
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		m := buf[(n+1+k)*slot : (n+1+k)*slot+size]
		for i := range m {
			m[i] = mcastPayload(2, k, i)
		}
		if _, err := qp.PostSend([]verbs.SendWR{{ID: uint64(100 + k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE((n+1+k)*slot, size)}, AH: ah, RemoteQPN: verbs.MulticastQPN, RemoteQKey: mcastQKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := verbstest.WaitOne(t, cq); wc.Status != verbs.WCSuccess || wc.WRID != uint64(100+k) {
			t.Fatalf("send %d: %+v", k, wc)
		}
	}
	say("sent2")
	if res := expect("result"); len(res) != 1 || res[0] != "ok" {
		t.Fatalf("host: %v", res)
	}
}

// ifaceOf returns the interface that holds addr.
func ifaceOf(t *testing.T, addr netip.Addr) *net.Interface {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ifs {
		as, _ := ifs[i].Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == addr {
				return &ifs[i]
			}
		}
	}
	t.Fatalf("no interface holds %v", addr)
	return nil
}
