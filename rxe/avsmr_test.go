package rxe_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// plainAH is an AH of a provider without modify_av.
type plainAH struct{ verbs.AH }

// TestModifyAH: modify_av moves an AH to another destination for the UD
// sends posted afterwards; bad vectors are refused with typed errors and
// leave the AH as it was.
func TestModifyAH(t *testing.T) {
	a, b := pair(t, verbs.QPTypeUD, rxe.Config{}, connOpts{}, 8192)
	c := newEnd(t, openDev(t, rxe.Config{}), verbs.QPTypeUD, 8192)
	connect(t, c, c, connOpts{})
	to := func(e *end) verbs.AHAttr {
		return verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(e.dev.Addr().Addr()), SGIDIndex: 1}}
	}
	atB, atC := to(b), to(c)
	ah, err := a.pd.CreateAH(&atB)
	if err != nil {
		t.Fatal(err)
	}
	fill(a.buf, 5)
	send := func(k int, dst *end) {
		t.Helper()
		postRecv(t, dst, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{dst.mr.SGE(k*200, 200)}})
		post(t, a, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(k*100, 100)}, AH: ah, RemoteQPN: dst.qp.QPN(), RemoteQKey: 0x11111111})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
		wc := waitWC(t, dst.cq, 1)[0]
		wantOK(t, wc, verbs.WCRecv)
		if wc.WRID != uint64(k) || !bytes.Equal(dst.buf[k*200+40:k*200+140], a.buf[k*100:k*100+100]) {
			t.Fatalf("send %d: %+v or payload differs", k, wc)
		}
	}
	send(1, b)
	if err := verbs.ModifyAH(ah, &atC); err != nil {
		t.Fatal(err)
	}
	if got := ah.Attr(); got != atC {
		t.Fatalf("Attr after modify: %+v", got)
	}
	if got, pd, err := verbs.QueryAH(ah); err != nil || got != atC || pd != a.pd {
		t.Fatalf("QueryAH: %+v %v %v", got, pd, err)
	}
	send(2, c)
	if err := verbs.ModifyAH(ah, &atB); err != nil {
		t.Fatal(err)
	}
	// b's next completion is message 3: message 2 went to c only.
	send(3, b)

	bad := func(mut func(*verbs.AHAttr)) *verbs.AHAttr {
		x := atC
		mut(&x)
		return &x
	}
	for _, tc := range []struct {
		name string
		ah   verbs.AH
		attr *verbs.AHAttr
		want error
	}{
		{"no DGID", ah, bad(func(x *verbs.AHAttr) { x.GRH.DGID = verbs.GID{} }), verbs.ErrInvalidArgument},
		{"IPv6 DGID on an IPv4 device", ah, bad(func(x *verbs.AHAttr) { x.GRH.DGID = verbs.GIDFromAddr(netip.MustParseAddr("fd00::1")) }), verbs.ErrInvalidArgument},
		{"SGID index not populated", ah, bad(func(x *verbs.AHAttr) { x.GRH.SGIDIndex = 9 }), verbs.ErrInvalidArgument},
		{"port 2", ah, bad(func(x *verbs.AHAttr) { x.PortNum = 2 }), verbs.ErrInvalidArgument},
		{"nil attributes", ah, nil, verbs.ErrInvalidArgument},
		{"provider without modify_av", plainAH{ah}, &atC, verbs.ErrNotSupported},
	} {
		if err := verbs.ModifyAH(tc.ah, tc.attr); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if got := ah.Attr(); got != atB {
		t.Fatalf("a refused modify changed the AH: %+v", got)
	}
	send(4, b)
	if err := ah.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := verbs.ModifyAH(ah, &atC); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("modify of a destroyed AH: %v, want ErrClosed", err)
	}
}

// plainPD is a PD of a provider without shared MRs.
type plainPD struct{ verbs.PD }

// TestSharedMR: register_smr gives a second MR over the same memory
// with its own keys, access and address; a peer reaches the memory
// through the shared rkey within its rights (REM_ACCESS_ERR beyond
// them), and deregistering either MR leaves the other working.
func TestSharedMR(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
	fill(b.buf, 7)
	const va = 0x7000_0000_0000
	ro, err := verbs.RegSharedMR(b.pd, b.mr, verbs.AccessLocalWrite|verbs.AccessRemoteRead, va)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := verbs.RegSharedMR(b.pd, b.mr, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessZeroBased, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ro.RKey() == b.mr.RKey() || rw.RKey() == b.mr.RKey() || ro.RKey() == rw.RKey() {
		t.Fatalf("keys not distinct: %#x %#x %#x", b.mr.RKey(), ro.RKey(), rw.RKey())
	}
	if ro.Addr() != va || rw.Addr() != 0 || ro.Len() != len(b.buf) || ro.Access() != verbs.AccessLocalWrite|verbs.AccessRemoteRead {
		t.Fatalf("shared MR: addr %#x/%#x len %d access %v", ro.Addr(), rw.Addr(), ro.Len(), ro.Access())
	}
	read := func(id uint64, off int) {
		t.Helper()
		post(t, a, verbs.SendWR{ID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)},
			RemoteAddr: va + uint64(off), RKey: ro.RKey()})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMARead)
		if !bytes.Equal(a.buf[:64], b.buf[off:off+64]) {
			t.Fatalf("READ %d through the shared rkey: data differs", id)
		}
	}
	write := func(id uint64, rkey uint32, raddr uint64, off int) {
		t.Helper()
		fill(a.buf[1024:1088], id)
		post(t, a, verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(1024, 64)},
			RemoteAddr: raddr, RKey: rkey})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMAWrite)
		b.sync()
		if !bytes.Equal(b.buf[off:off+64], a.buf[1024:1088]) {
			t.Fatalf("WRITE %d: data differs", id)
		}
	}
	read(1, 100)
	write(2, rw.RKey(), 200, 200) // zero-based: offset 200
	read(3, 200)                  // the read-only view sees the write
	if err := rw.Dereg(); err != nil {
		t.Fatal(err)
	}
	write(4, b.mr.RKey(), b.mr.Addr()+300, 300) // the original survives its shared MR
	if err := b.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	read(5, 300) // and the shared MR its original
	post(t, a, verbs.SendWR{ID: 6, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(1024, 64)},
		RemoteAddr: va, RKey: ro.RKey()})
	if wc := waitWC(t, a.cq, 1)[0]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through a read-only shared MR: %v, want REM_ACCESS_ERR", wc.Status)
	}

	// A shared MR in another PD is not reachable from the QP's PD.
	a2, b2 := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
	pd2, err := b2.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	other, err := verbs.RegSharedMR(pd2, b2.mr, verbs.AccessRemoteRead, b2.mr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("dealloc of a PD with a shared MR: %v, want ErrBusy", err)
	}
	post(t, a2, verbs.SendWR{ID: 7, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a2.mr.SGE(0, 64)},
		RemoteAddr: other.Addr(), RKey: other.RKey()})
	if wc := waitWC(t, a2.cq, 1)[0]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("READ through a shared MR of another PD: %v, want REM_ACCESS_ERR", wc.Status)
	}

	fast, err := verbs.AllocMR(b2.pd, verbs.MRTypeMemReg, 4)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := b2.pd.RegMR(make([]byte, 64), verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Dereg(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pd     verbs.PD
		mr     verbs.MR
		access verbs.AccessFlags
		vaddr  uint64
		want   error
	}{
		{"remote write without local write", b2.pd, b2.mr, verbs.AccessRemoteWrite, 0, verbs.ErrInvalidArgument},
		{"unknown access", b2.pd, b2.mr, 1 << 12, 0, verbs.ErrInvalidArgument},
		{"zero-based at an address", b2.pd, b2.mr, verbs.AccessZeroBased, 4096, verbs.ErrInvalidArgument},
		{"fast-reg MR", b2.pd, fast, verbs.AccessRemoteRead, 0, verbs.ErrInvalidArgument},
		{"MR of another device", b2.pd, a2.mr, verbs.AccessRemoteRead, 0, verbs.ErrInvalidArgument},
		{"deregistered MR", b2.pd, gone, verbs.AccessRemoteRead, 0, verbs.ErrClosed},
		{"nil MR", b2.pd, nil, verbs.AccessRemoteRead, 0, verbs.ErrInvalidArgument},
		{"provider without shared MRs", plainPD{b2.pd}, b2.mr, verbs.AccessRemoteRead, 0, verbs.ErrNotSupported},
	} {
		if _, err := verbs.RegSharedMR(tc.pd, tc.mr, tc.access, tc.vaddr); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestModifyAHConcurrent: modify_av racing UD posts through the AH:
// every datagram goes whole to one of the two destinations (run with
// -race: a post reads the vector while Modify replaces it).
func TestModifyAHConcurrent(t *testing.T) {
	a, b := pair(t, verbs.QPTypeUD, rxe.Config{}, connOpts{}, 8192)
	c := newEnd(t, openDev(t, rxe.Config{}), verbs.QPTypeUD, 8192)
	connect(t, c, c, connOpts{})
	to := func(e *end) verbs.AHAttr {
		return verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(e.dev.Addr().Addr()), SGIDIndex: 1}}
	}
	atB, atC := to(b), to(c)
	ah, err := a.pd.CreateAH(&atB)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for _, e := range []*end{b, c} {
		for k := range n {
			postRecv(t, e, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{e.mr.SGE(0, 128)}})
		}
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			attr := atB
			if i%2 == 1 {
				attr = atC
			}
			if err := verbs.ModifyAH(ah, &attr); err != nil {
				done <- err
				return
			}
		}
	}()
	// One RemoteQPN must name the receiving QP on either device: a
	// device numbers its QPs in order, so b and c (each its device's
	// first QP) have the same number.
	if b.qp.QPN() != c.qp.QPN() {
		t.Fatalf("the two UD QPs have different QPNs (%#x, %#x)", b.qp.QPN(), c.qp.QPN())
	}
	for k := range n {
		post(t, a, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(0, 64)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := 0
	wcs := make([]verbs.WC, 64)
	for deadline := time.Now().Add(20 * time.Second); got < n; {
		for _, e := range []*end{b, c} {
			k, err := e.cq.Poll(wcs)
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+64 {
					t.Fatalf("receive %+v", wc)
				}
			}
			got += k
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d datagrams arrived", got, n)
		}
	}
}
