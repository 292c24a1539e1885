package rxe_test

import (
	"os"
	"path/filepath"
	"testing"

	"softib/internal/pcap"
	"softib/internal/testenv"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/roce"
)

// TestCaptureTrafficClass reads back a --pcap capture of an RC
// connection whose two paths have their own traffic class and hop limit
// (ECN bits included) and checks each sent record's IPv4 TOS and TTL are
// its sender's path values, the header checksum still right and the ICRC
// still good (both fields are masked out of it). TestTrafficClassCapture
// checks the same on the wire.
func TestCaptureTrafficClass(t *testing.T) {
	var capA, capB testenv.Buffer
	da := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Capture: &capA}})
	db := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Capture: &capB}})
	a, b := newEnd(t, da, verbs.QPTypeRC, 1<<20), newEnd(t, db, verbs.QPTypeRC, 1<<20)
	connectPath(t, a, b, 0x60, 9)
	connectPath(t, b, a, 0x8A, 17)
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(512<<10, 4096)}})
	post(t, a,
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 16<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(128<<10, 16<<10)}, RemoteAddr: b.mr.Addr() + 256<<10, RKey: b.mr.RKey()},
		verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 100)}})
	for _, wc := range waitWC(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	waitWC(t, b.cq, 1)
	da.Close()
	db.Close()
	want := map[[4]byte][2]uint8{da.Addr().Addr().As4(): {0x60, 9}, db.Addr().Addr().As4(): {0x8A, 17}}
	for _, side := range []struct {
		name string
		dev  *rxe.Device
		cap  *testenv.Buffer
	}{{"a", da, &capA}, {"b", db, &capB}} {
		path := filepath.Join(t.TempDir(), side.name+".pcap")
		if err := os.WriteFile(path, side.cap.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		_, recs, err := pcap.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		for i, r := range recs {
			f, err := roce.ParseFrame(r.Data)
			if err != nil {
				t.Fatalf("%s: record %d: %v", side.name, i, err)
			}
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("%s: record %d: %v", side.name, i, err)
			}
			if roce.IPv4Checksum(f.IP) != 0 {
				t.Errorf("%s: record %d: bad IPv4 header checksum", side.name, i)
			}
			if f.Src.Addr() != side.dev.Addr().Addr() {
				continue // received: the socket reports no TTL
			}
			sent++
			w := want[f.Src.Addr().As4()]
			if f.IP[1] != w[0] || f.IP[8] != w[1] {
				t.Errorf("%s: record %d (%v): TOS %#x TTL %d, want %#x %d", side.name, i,
					f.Packet.BTH().Opcode(), f.IP[1], f.IP[8], w[0], w[1])
			}
		}
		if sent == 0 {
			t.Errorf("%s: no sent packets captured", side.name)
		}
	}
}
