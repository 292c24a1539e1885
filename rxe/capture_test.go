package rxe_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"softib/internal/pcap"
	"softib/internal/testenv"
	"softib/internal/tsharktest"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/roce"
)

// TestCapture captures one side of an RC connection that moves
// multi-packet WRITEs and SENDs (which leave as GSO batches and arrive as
// GRO super-datagrams) and checks the capture: one record per RoCE
// packet, as many as the device's sent_pkts + its received datagrams,
// every ICRC right under the synthesised headers, and nothing tshark
// calls malformed.
func TestCapture(t *testing.T) {
	// Both sides capture: a's shows what leaves as GSO batches, b's
	// what arrives as GRO super-datagrams.
	var capA, capB testenv.Buffer
	da := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Capture: &capA}})
	db := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Capture: &capB}})
	const size = 64 << 10
	a, b := newEnd(t, da, verbs.QPTypeRC, size), newEnd(t, db, verbs.QPTypeRC, size)
	connect(t, a, b, connOpts{})
	connect(t, b, a, connOpts{})
	for i := range 4 {
		postRecv(t, b, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(0, size)}})
		post(t, a,
			verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, size)}})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
		wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRecv)
	}
	// Closing a device waits for its goroutines, so nothing is written
	// after (b's last ACKs may trail the completions a saw).
	da.Close()
	db.Close()
	var path string
	for _, side := range []struct {
		name string
		dev  *rxe.Device
		cap  *testenv.Buffer
	}{{"a", da, &capA}, {"b", db, &capB}} {
		st := side.dev.Stats()
		path = filepath.Join(t.TempDir(), side.name+".pcap")
		if err := os.WriteFile(path, side.cap.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		lt, recs, err := pcap.ReadFile(path)
		if err != nil || lt != pcap.LinkTypeRaw {
			t.Fatalf("read capture: link type %d, %v", lt, err)
		}
		var tx, rx int
		for i, r := range recs {
			f, err := roce.ParseFrame(r.Data)
			if err != nil {
				t.Fatalf("%s: record %d: %v", side.name, i, err)
			}
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("%s: record %d: %v", side.name, i, err)
			}
			if f.Src.Addr() == side.dev.Addr().Addr() {
				tx++
			} else {
				rx++
			}
		}
		// Every received datagram is captured, including those the
		// checks drop; none is dropped here.
		if uint64(tx) != st["SentPkts"] || uint64(rx) != st["RcvdPkts"] {
			t.Errorf("%s: captured %d sent, %d received; device counted %d, %d", side.name, tx, rx, st["SentPkts"], st["RcvdPkts"])
		}
		if want := 4 * 2 * (size / 1024); max(tx, rx) < want {
			t.Errorf("%s: captured %d sent, %d received packets, want at least %d data packets (one record per packet)", side.name, tx, rx, want)
		}
		tsharktest.CheckNoMalformed(t, path)
	}
	rows := tsharktest.Fields(t, path, []string{"infiniband.bth.opcode"}, "-Y", "infiniband.bth.opcode == 6")
	if len(rows) == 0 {
		t.Errorf("tshark decodes no RC RDMA WRITE First")
	}
}

// TestResourcesAndCounters reads a connected device's counters (rxe's
// names first) and resources.
func TestResourcesAndCounters(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
	postRecv(t, b, verbs.RecvWR{SGL: []verbs.SGE{b.mr.SGE(0, 4096)}})
	post(t, a, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 4096)}})
	waitWC(t, a.cq, 1)
	waitWC(t, b.cq, 1)

	cs := a.dev.Counters()
	if cs[0].Name != "sent_pkts" || cs[0].Value == 0 {
		t.Errorf("first counter %+v, want sent_pkts > 0", cs[0])
	}
	names := map[string]bool{}
	for _, c := range cs {
		names[c.Name] = true
	}
	count := func(d *rxe.Device, name string) uint64 {
		for _, c := range d.Counters() {
			if c.Name == name {
				return c.Value
			}
		}
		return 0
	}
	if s, r := count(a.dev, "rdma_sends"), count(b.dev, "rdma_recvs"); s != 1 || r != 1 {
		t.Errorf("rdma_sends %d, rdma_recvs %d; want 1, 1", s, r)
	}
	for _, n := range []string{"rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
		"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err", "link_downed", "rdma_sends", "rdma_recvs", "icrc_err", "icrc_ipv4_id"} {
		if !names[n] {
			t.Errorf("no counter %s in %v", n, cs)
		}
	}

	r := a.dev.Resources()
	if len(r.QPs) != 1 || len(r.CQs) != 1 || len(r.MRs) != 1 || len(r.PDs) != 1 || r.PDCount != 1 {
		t.Fatalf("resources %+v, want 1 QP, CQ, MR, PD", r)
	}
	q := r.QPs[0]
	if q.QPN != a.qp.QPN() || q.State != "RTS" || q.Type != "RC" || q.DestQPN != b.qp.QPN() || q.Peer != b.dev.Addr() {
		t.Errorf("QP %+v", q)
	}
	var sent uint64
	for _, c := range q.Counters {
		if c.Name == "sent_pkts" {
			sent = c.Value
		}
	}
	if want := uint64(4096 / 1024); sent < want {
		t.Errorf("QP sent_pkts %d, want >= %d", sent, want)
	}
	if r.MRs[0].LKey != a.mr.LKey() || r.MRs[0].Length != 4096 {
		t.Errorf("MR %+v", r.MRs[0])
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{"ICRCErr": "icrc_err", "RcvdPkts": "rcvd_pkts", "ICRCIPv4ID": "icrc_ipv4_id",
		"NoQP": "no_qp", "BadQPType": "bad_qp_type", "BadPKey": "bad_pkey", "SportFallback": "sport_fallback", "SendErr": "send_err"} {
		if got := rxe.SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestQPCounters checks that the per-QP counters follow the device's:
// a SEND that meets no receive WQE makes the responder send RNR NAKs
// (send_rnr_err on its QP) and the requester count them (rcvd_rnr_err),
// until a receive is posted.
func TestQPCounters(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{minRNR: 1, rnrRetry: 7}, 4096)
	qpCounter := func(e *end, name string) uint64 {
		for _, q := range e.dev.Resources().QPs {
			if q.QPN == e.qp.QPN() {
				for _, c := range q.Counters {
					if c.Name == name {
						return c.Value
					}
				}
			}
		}
		return 0
	}
	post(t, a, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)}})
	// Wait (hang guard 20 s) for the first RNR NAK to come back.
	for deadline := time.Now().Add(20 * time.Second); qpCounter(a, "rcvd_rnr_err") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no RNR NAK counted: device %v", a.dev.Stats())
		}
	}
	postRecv(t, b, verbs.RecvWR{SGL: []verbs.SGE{b.mr.SGE(0, 4096)}})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRecv)
	if s, r := qpCounter(b, "send_rnr_err"), qpCounter(a, "rcvd_rnr_err"); s == 0 || r == 0 || r > s {
		t.Errorf("QP counters: responder send_rnr_err %d, requester rcvd_rnr_err %d", s, r)
	}
	if s, r := qpCounter(a, "rdma_sends"), qpCounter(b, "rdma_recvs"); s != 1 || r != 1 {
		t.Errorf("QP counters: rdma_sends %d, rdma_recvs %d; want 1, 1", s, r)
	}
}

// TestCaptureAllocs checks that capturing allocates nothing per packet
// either (the frame and record buffers are reused): a WRITE, READ and
// SEND round between two capturing devices.
func TestCaptureAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{Capture: io.Discard}}
	x, y := pair(t, verbs.QPTypeRC, cfg, connOpts{}, 1<<16)
	wc, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	w := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	rd := []verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(32<<10, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	s := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 100)}}}
	r := []verbs.RecvWR{{SGL: []verbs.SGE{y.mr.SGE(0, 4096)}}}
	round := func() {
		x.qp.PostSend(w)
		pollSpin(t, x.cq, wc)
		x.qp.PostSend(rd)
		pollSpin(t, x.cq, wc)
		y.qp.PostRecv(r)
		x.qp.PostSend(s)
		pollSpin(t, x.cq, wc)
		pollSpin(t, y.cq, wcy)
	}
	for range 50 {
		round() // warm pools, rings and the capture's buffers
	}
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Fatalf("%v allocations per WRITE+READ+SEND round with capture on", a)
	}
}
