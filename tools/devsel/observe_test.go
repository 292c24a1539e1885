package devsel_test

import (
	"path/filepath"
	"strings"
	"testing"

	"softib/internal/pcap"
	"softib/internal/verbstest"
	"softib/rxe"
	"softib/tools/devsel"
	"softib/verbs"
	"softib/wire/roce"
)

// TestCaptureShared opens two devices of one process with --pcap: they
// share the file (one file header), and every packet shows twice, sent
// by one device and received by the other, each with a correct ICRC.
func TestCaptureShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "two.pcap")
	devsel.SetPcapPath(path)
	defer devsel.SetPcapPath("")
	n := verbstest.Loopback()
	var ends []*verbstest.End
	for range 2 {
		var cfg rxe.Config
		if err := devsel.CaptureConfig(&cfg.DeviceConfig); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, verbstest.NewEnd(t, n.Open(t, cfg), verbs.QPTypeRC, verbstest.EndOpts{Buf: 8192}))
	}
	a, b := ends[0], ends[1]
	verbstest.Connect(t, a, b, verbstest.ConnOpts{})
	verbstest.Connect(t, b, a, verbstest.ConnOpts{})
	verbstest.PostRecv(t, b, verbs.RecvWR{SGL: []verbs.SGE{b.MR.SGE(0, 8192)}})
	verbstest.Post(t, a, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.MR.SGE(0, 8192)}})
	verbstest.WantOK(t, verbstest.WaitOne(t, a.CQ), verbs.WCSend)
	verbstest.WantOK(t, verbstest.WaitOne(t, b.CQ), verbs.WCRecv)
	a.Dev.Close()
	b.Dev.Close()
	if err := devsel.FinishObserve(); err != nil {
		t.Fatal(err)
	}
	lt, recs, err := pcap.ReadFile(path)
	if err != nil || lt != pcap.LinkTypeRaw {
		t.Fatalf("capture: link type %d, %v", lt, err)
	}
	sa, sb := a.Dev.(*rxe.Device).Stats(), b.Dev.(*rxe.Device).Stats()
	if want := sa["SentPkts"] + sa["RcvdPkts"] + sb["SentPkts"] + sb["RcvdPkts"]; uint64(len(recs)) != want || want < 2*8 {
		t.Errorf("%d records, want %d (both devices' packets, 8 KiB = 8 packets each way at least)", len(recs), want)
	}
	for i, r := range recs {
		f, err := roce.ParseFrame(r.Data)
		if err == nil {
			err = f.VerifyICRC()
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// otherDev is a device of another provider: no counters, no capture.
type otherDev struct{ verbs.Device }

func (otherDev) Name() string { return "other0" }

// TestObserveOtherProvider: a device that is not softib's rxe is not
// published, and --pcap on it is refused rather than ignored.
func TestObserveOtherProvider(t *testing.T) {
	if err := devsel.Observe(otherDev{}); err != nil {
		t.Errorf("Observe without --pcap: %v", err)
	}
	devsel.SetPcapPath(filepath.Join(t.TempDir(), "x.pcap"))
	defer devsel.SetPcapPath("")
	if err := devsel.Observe(otherDev{}); err == nil || !strings.Contains(err.Error(), "--pcap") {
		t.Errorf("Observe with --pcap: %v", err)
	}
}
