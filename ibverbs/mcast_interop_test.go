//go:build linux

package ibverbs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/verbstest"
	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/verbs"
)

// EnvMcastCtl is the host's control address for TestMcastGuest, which
// TestInteropIBVerbs sets in the guest.
const EnvMcastCtl = "SOFTIB_IBVERBS_MCAST_CTL"

// mcastQKey is RDMA_UDP_QKEY, the Q_Key of the RDMA CM's UD groups.
const mcastQKey = 0x01234567

// mcastPayload is byte i of multicast message k from the side seeded
// seed; both sides of TestInteropIBVerbs' multicast subtest use it.
func mcastPayload(seed, k, i int) byte { return byte(seed + k*31 + i*7) }

// mcastInterop is TestInteropIBVerbs' multicast subtest, the host half
// of TestMcastGuest (which the guest runs from the ibverbs test binary):
// softib's pure-Go device on the host sends UD datagrams to group G1,
// which the ibverbs provider's QP on the guest's rxe0 is attached to;
// after the guest detaches, four more to G1 and a unicast fence show
// that detach stops delivery; then the guest sends to G2, where a QP of
// the host device is attached. Both sides check the payloads and the
// GRH area (the IPv4 header, destination the group).
func mcastInterop(ctx context.Context, t *testing.T, v *vm.VM) {
	const n, size = 16, 256
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	g1, g2 := netip.MustParseAddr("239.15.5.1"), netip.MustParseAddr("239.15.5.2")
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(verbs.CQAttr{CQE: 4 * n})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 2 * n, MaxRecvWR: 2 * n, MaxSendSGE: 1, MaxRecvSGE: 1}})
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
	buf := make([]byte, 2*n*slot)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		if _, err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(k), SGL: []verbs.SGE{mr.SGE(k*slot, slot)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := verbs.AttachMcast(qp, verbs.GIDFromAddr(g2), 0); err != nil {
		t.Fatal(err)
	}
	send := func(id uint64, ah verbs.AH, qpn uint32, off, length int, op verbs.WROpcode, imm uint32) {
		t.Helper()
		if _, err := qp.PostSend([]verbs.SendWR{{ID: id, Opcode: op, ImmData: imm, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(off, length)}, AH: ah, RemoteQPN: qpn, RemoteQKey: mcastQKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := verbstest.WaitOne(t, cq); wc.Status != verbs.WCSuccess || wc.WRID != id {
			t.Fatalf("send %d: %+v", id, wc)
		}
	}
	ahTo := func(a netip.Addr) verbs.AH {
		t.Helper()
		ah, err := pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(a), SGIDIndex: 1, HopLimit: 8}})
		if err != nil {
			t.Fatal(err)
		}
		return ah
	}

	var ln net.Listener
	if err := netns.Run(v.Namespace(), func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(host, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	job, err := v.Go("mcast-ibverbs", fmt.Sprintf("cd /tmp && SOFTIB_IBVERBS_DEVICE=rxe0 %s=%s /mnt/jobs/ibverbs.test -test.v -test.count=1 -test.run 'TestMcastGuest$' 2>&1",
		EnvMcastCtl, ln.Addr()), 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	guestOut := func() string {
		r, err := job.Wait(ctx)
		return fmt.Sprintf("guest (ibverbs on rxe0), exit %d (%v):\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(3 * time.Minute))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("guest did not connect: %v\n%s", err, guestOut())
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	r := bufio.NewReader(c)
	fail := func(format string, args ...any) {
		t.Helper()
		fmt.Fprintf(c, "result fail\n")
		c.Close()
		t.Fatalf(format+"\n%s", append(args, guestOut())...)
	}
	expect := func(word string) []string {
		t.Helper()
		line, err := r.ReadString('\n')
		f := strings.Fields(line)
		if err != nil || len(f) == 0 || f[0] != word {
			fail("control: got %q (%v), want %s", line, err, word)
		}
		return f[1:]
	}
	fmt.Fprintf(c, "groups %v %v %v %d %d\n", g1, g2, host, n, size)
	var gqpn uint32
	fmt.Sscan(expect("ready")[0], &gqpn)

	// Host -> guest through G1.
	sbuf := buf[n*slot:]
	ah1 := ahTo(g1)
	for k := range n {
		for i := range size {
			sbuf[k*size+i] = mcastPayload(1, k, i)
		}
		send(uint64(1000+k), ah1, verbs.MulticastQPN, n*slot+k*size, size, verbs.WRSend, 0)
	}
	fmt.Fprintf(c, "sent\n")
	// Detached: the group's datagrams no longer reach the guest's QP;
	// the unicast one sent after them is its next completion.
	expect("detached")
	for k := range 4 {
		send(uint64(2000+k), ah1, verbs.MulticastQPN, n*slot, size, verbs.WRSend, 0)
	}
	send(3000, ahTo(guest), gqpn, n*slot, 16, verbs.WRSendWithImm, 0xFE)
	fmt.Fprintf(c, "fenced\n")

	// Guest -> host through G2.
	expect("sent2")
	gs, dst := guest.As4(), g2.As4()
	for k, wc := range verbstest.WaitWC(t, cq, n) {
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.WRID != uint64(k) || wc.ByteLen != uint32(slot) {
			fail("host receive %d: %+v", k, wc)
		}
		m := buf[k*slot : (k+1)*slot]
		if ip := m[20:40]; !bytes.Equal(ip[12:16], gs[:]) || !bytes.Equal(ip[16:20], dst[:]) {
			fail("host receive %d: GRH area % x, want the IPv4 header %v -> %v", k, m[:40], guest, g2)
		}
		for i, b := range m[40:] {
			if b != mcastPayload(2, k, i) {
				fail("host receive %d: byte %d is %#x, want %#x", k, i, b, mcastPayload(2, k, i))
			}
		}
	}
	fmt.Fprintf(c, "result ok\n")
	out := guestOut()
	t.Log(out)
	if !strings.Contains(out, "--- PASS: TestMcastGuest") {
		t.Fatal("TestMcastGuest did not pass in the guest")
	}
	t.Logf("host: %d datagrams from the guest's ibverbs QP (Linux rxe) received on group %v", n, g2)
}
