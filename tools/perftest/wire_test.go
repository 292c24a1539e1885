package perftest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"testing"

	"softib/tools/perftest"
	"softib/verbs"
)

var gid2 = verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2"))

func TestKeyGolden(t *testing.T) {
	k := perftest.Key{LID: 0, OutReads: 1, QPN: 0x11, PSN: 0x123456, RKey: 0x202, VAddr: 0x7f00deadbeef, GID: gid2, HasGID: true}
	want := "0000:0001:000011:123456:00000202:00007f00deadbeef:00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:02:00000000:\x00"
	if got := string(k.Append(nil)); got != want || len(got) != perftest.KeyMsgLenGID || k.Len() != len(got) {
		t.Fatalf("GID key %q (%d), want %q", got, len(got), want)
	}
	back, err := perftest.ParseKey([]byte(want), true)
	if err != nil || back != k {
		t.Fatalf("ParseKey = %+v, %v", back, err)
	}
	k.HasGID, k.GID, k.SRQN = false, verbs.GID{}, 0xabc
	want = "0000:0001:000011:123456:00000202:00007f00deadbeef:00000abc\x00"
	if got := string(k.Append(nil)); got != want || len(got) != perftest.KeyMsgLen || k.Len() != len(got) {
		t.Fatalf("key %q (%d), want %q", got, len(got), want)
	}
	back, err = perftest.ParseKey([]byte(want), false)
	if err != nil || back != k {
		t.Fatalf("ParseKey = %+v, %v", back, err)
	}
	for _, bad := range []string{"", "0000:0001", want[:20], "zzzz:0001:000011:123456:00000202:00007f00deadbeef:00000abc"} {
		if _, err := perftest.ParseKey([]byte(bad), false); !errors.Is(err, perftest.ErrBadMessage) {
			t.Errorf("ParseKey(%q) err %v", bad, err)
		}
	}
	if _, err := perftest.ParseKey([]byte(want), true); !errors.Is(err, perftest.ErrBadMessage) {
		t.Error("short message parsed as GID format")
	}
}

func FuzzParseKey(f *testing.F) {
	k := perftest.Key{OutReads: 128, QPN: 0x11, PSN: 0xffffff, RKey: 0xffffffff, VAddr: math.MaxUint64, GID: gid2, HasGID: true}
	f.Add(k.Append(nil), true)
	k.HasGID = false
	f.Add(k.Append(nil), false)
	f.Fuzz(func(t *testing.T, b []byte, gid bool) {
		k, err := perftest.ParseKey(b, gid)
		if err != nil {
			return
		}
		again, err := perftest.ParseKey(k.Append(nil), gid)
		if err != nil || again != k || len(k.Append(nil)) != k.Len() {
			t.Fatalf("round trip %+v -> %+v, %v", k, again, err)
		}
	})
}

func TestReportGolden(t *testing.T) {
	r := perftest.BWReport{Size: 65536, Iters: 5000, BWPeak: 1.5, BWAvg: 1.25, MsgRate: 0.5}
	b := r.Append(nil)
	if len(b) != 40 || r.Len() != 40 {
		t.Fatalf("len %d", len(b))
	}
	if binary.BigEndian.Uint64(b) != 65536 || binary.BigEndian.Uint64(b[8:]) != 5000 ||
		binary.BigEndian.Uint64(b[16:]) != 0x3ff8000000000000 || binary.BigEndian.Uint64(b[24:]) != 0x3ff4000000000000 {
		t.Fatalf("report bytes % x", b)
	}
	back, err := perftest.ParseBWReport(b)
	if err != nil || back != r {
		t.Fatalf("ParseBWReport %+v %v", back, err)
	}
	if _, err := perftest.ParseBWReport(b[:39]); !errors.Is(err, perftest.ErrBadMessage) {
		t.Fatal("short report accepted")
	}
}

func FuzzParseBWReport(f *testing.F) {
	r := perftest.BWReport{Size: 8, Iters: 1, BWPeak: 1, BWAvg: 2, MsgRate: 3}
	f.Add(r.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := perftest.ParseBWReport(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.Append(nil), b) {
			t.Fatalf("round trip % x", b)
		}
	})
}

func TestVersionAndMTU(t *testing.T) {
	m := perftest.VersionMsg(perftest.Version)
	if string(m[:]) != "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("version message %q", m)
	}
	for in, want := range map[string]float64{"6.06": 6.06, "5.70\x00junk": 5.7, "6.29-rc1": 6.29, "": 0, "x": 0} {
		if _, v := perftest.ParseVersion([]byte(in)); v != want {
			t.Errorf("ParseVersion(%q) = %v, want %v", in, v, want)
		}
	}
	if mm := perftest.MTUMsg(verbs.MTU1024); string(mm[:]) != "3\x00" {
		t.Fatalf("MTU message %q", mm)
	}
	if perftest.ParseMTUMsg([]byte("5\x00")) != verbs.MTU4096 || perftest.ParseMTUMsg([]byte("9\x00")) != 0 || perftest.ParseMTUMsg(nil) != 0 {
		t.Fatal("ParseMTUMsg")
	}
}

func FuzzParseVersion(f *testing.F) {
	m := perftest.VersionMsg("6.06")
	f.Add(m[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		perftest.ParseVersion(b)
		perftest.ParseMTUMsg(b)
	})
}

// fieldPeer is a scripted perftest server: it reads and writes the
// preamble and reports one field at a time over an unbuffered pipe, as
// the real tool does, so a client that batches would deadlock here.
func fieldPeer(t *testing.T, c net.Conn, rep perftest.BWReport) (got []byte, err error) {
	xchg := func(mine []byte) ([]byte, error) {
		b := make([]byte, len(mine))
		if _, err := io.ReadFull(c, b); err != nil {
			return nil, err
		}
		_, err := c.Write(mine)
		return b, err
	}
	v := perftest.VersionMsg("6.06")
	steps := [][]byte{v[:], {0, 0, 0x10, 0}, {0, 0, 0, 64}, {'3', 0}}
	rb := rep.Append(nil)
	for i := 0; i < len(rb); i += 8 {
		steps = append(steps, rb[i:i+8])
	}
	for _, s := range steps {
		b, err := xchg(s)
		if err != nil {
			return got, err
		}
		got = append(got, b...)
	}
	return got, nil
}

func TestProtoLockstep(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	peerRep := perftest.BWReport{Size: 2, Iters: 3, BWPeak: 4, BWAvg: 5, MsgRate: 6}
	done := make(chan []byte, 1)
	go func() {
		got, err := fieldPeer(t, srv, peerRep)
		if err != nil {
			t.Error(err)
		}
		srv.Close()
		done <- got
	}()
	p := &perftest.Proto{Ctrl: perftest.NewTCPCtrl(cli, true)}
	_, v, err := p.Versions(perftest.Version)
	if err != nil || v != 6.06 {
		t.Fatalf("versions %v %v", v, err)
	}
	cycle, cl, err := p.SysData(v, 4096, 64)
	if err != nil || cycle != 4096 || cl != 64 {
		t.Fatalf("sysdata %d %d %v", cycle, cl, err)
	}
	mtu, err := p.MTU(v, verbs.MTU4096)
	if err != nil || mtu != verbs.MTU1024 {
		t.Fatalf("mtu %v %v", mtu, err)
	}
	my := perftest.BWReport{Size: 65536, Iters: 10, BWPeak: 1, BWAvg: 1, MsgRate: 1}
	rem, err := p.Reports(v, &my)
	if err != nil || rem != peerRep {
		t.Fatalf("reports %+v %v", rem, err)
	}
	got := <-done
	v6 := perftest.VersionMsg(perftest.Version)
	want := append(append([]byte{}, v6[:]...), 0, 0, 0x10, 0, 0, 0, 0, 64, '5', 0)
	want = append(want, my.Append(nil)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("peer saw\n% x\nwant\n% x", got, want)
	}
}

func TestOldPeerRefused(t *testing.T) {
	cli, srv := net.Pipe()
	go func() {
		b := make([]byte, 16)
		io.ReadFull(srv, b)
		v := perftest.VersionMsg("5.60")
		srv.Write(v[:])
		srv.Close()
	}()
	p := &perftest.Proto{Ctrl: perftest.NewTCPCtrl(cli, true)}
	if _, _, err := p.Versions(perftest.Version); !errors.Is(err, perftest.ErrVersion) {
		t.Fatalf("old peer: %v", err)
	}
}
