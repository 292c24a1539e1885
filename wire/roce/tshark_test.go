package roce_test

import (
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/pcap"
	"softib/internal/seqnum"
	"softib/internal/tsharktest"
	"softib/wire/roce"
)

// tsharkFields are the fields the test compares, in column order.
var tsharkFields = []string{
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
	"infiniband.bth.a", "infiniband.bth.se", "infiniband.bth.p_key",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.immdt", "infiniband.ieth",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
	"infiniband.invariant.crc", "data.data",
}

// realisticHeaders returns headers as an rxe peer would send them for op,
// the i-th packet of a capture.
func realisticHeaders(op roce.Opcode, i int) roce.Headers {
	h := roce.Headers{BTH: roce.BTHFields{
		Opcode: op, PKey: roce.DefaultPKey, DestQP: 0xC1,
		PSN: seqnum.PSN(0xFFFFF0).Add(i), // crosses the 24-bit wrap
	}}
	if op.Is(roce.MaskReq|roce.MaskEnd) && op.Transport() == roce.TransportRC {
		h.BTH.AckReq = true
	}
	if op.Is(roce.MaskSend | roce.MaskEnd) {
		h.BTH.SE = i%2 == 0
	}
	switch {
	case op.Is(roce.MaskRETH):
		h.RETH = roce.RETHFields{VA: 0x7F3A_1C00_0000 + uint64(i)*4096, RKey: 0x0001_2B00 | uint32(i), DMALen: 3000 + uint32(i)}
	case op.Is(roce.MaskAtomicETH):
		h.AtomicETH = roce.AtomicETHFields{VA: 0x7F3A_1C00_0008, RKey: 0x0001_2B07, SwapAdd: 0x1122334455667788 + uint64(i), Compare: 42}
	}
	if op.Is(roce.MaskAETH) {
		h.AETH = roce.AETHFields{Syndrome: roce.SyndromeACKUnlimited, MSN: seqnum.MSN(100 + i)}
		if op == roce.RCAck && i%2 == 1 {
			h.AETH.Syndrome = roce.RNRNAKSyndrome(12)
		}
	}
	if op.Is(roce.MaskAtomicAckETH) {
		h.AtomicAckData = 0x0102030405060708
	}
	if op.Is(roce.MaskImmDt) {
		h.ImmDt = 0xC0FFEE00 | uint32(i)
	}
	if op.Is(roce.MaskIETH) {
		h.IETHRKey = 0x00AB_CD00 | uint32(i)
	}
	if op.Is(roce.MaskDETH) {
		h.BTH.DestQP = 0x12
		h.DETH = roce.DETHFields{QKey: 0x11111111, SrcQP: 0x13}
	}
	return h
}

func realisticPayload(op roce.Opcode, i int) []byte {
	if !op.Is(roce.MaskPayload) {
		return nil
	}
	// Lengths 1..7 and text that no heuristic dissector claims.
	s := fmt.Sprintf("softib %v #%d ", op, i)
	return []byte(s[:len(s)-(i%4)])
}

// wantFields renders h, payload and the ICRC the way tshark prints them.
func wantFields(h *roce.Headers, payload []byte, icrc uint32) []string {
	op := h.BTH.Opcode
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	pad := roce.PadLen(len(payload))
	w := make([]string, len(tsharkFields))
	w[0] = fmt.Sprint(uint8(op))
	w[1] = fmt.Sprintf("0x%06x", h.BTH.DestQP)
	w[2] = fmt.Sprint(uint32(h.BTH.PSN))
	w[3] = fmt.Sprint(pad)
	w[4], w[5] = b(h.BTH.AckReq), b(h.BTH.SE)
	w[6] = fmt.Sprint(h.BTH.PKey)
	if op.Is(roce.MaskRETH) {
		w[7] = fmt.Sprintf("0x%016x", h.RETH.VA)
		w[8] = fmt.Sprintf("0x%08x", h.RETH.RKey)
		w[9] = fmt.Sprint(h.RETH.DMALen)
	}
	if op.Is(roce.MaskAETH) {
		w[10] = fmt.Sprint(uint8(h.AETH.Syndrome))
		w[11] = fmt.Sprint(uint32(h.AETH.MSN))
	}
	if op.Is(roce.MaskDETH) {
		w[12] = fmt.Sprintf("0x%016x", h.DETH.QKey)
		w[13] = fmt.Sprintf("0x%08x", h.DETH.SrcQP)
	}
	if op.Is(roce.MaskImmDt) {
		w[14] = fmt.Sprintf("%08x", h.ImmDt)
	}
	if op.Is(roce.MaskIETH) {
		w[15] = fmt.Sprintf("%08x", h.IETHRKey)
	}
	if op.Is(roce.MaskAtomicETH) {
		// Wireshark reuses the RETH fields for the AtomicETH VA and R_Key.
		w[7] = fmt.Sprintf("0x%016x", h.AtomicETH.VA)
		w[8] = fmt.Sprintf("0x%08x", h.AtomicETH.RKey)
		w[16] = fmt.Sprint(h.AtomicETH.SwapAdd)
		w[17] = fmt.Sprint(h.AtomicETH.Compare)
	}
	if op.Is(roce.MaskAtomicAckETH) {
		w[18] = fmt.Sprint(h.AtomicAckData)
	}
	// Wireshark shows the little-endian trailer as a big-endian number.
	w[19] = fmt.Sprintf("0x%08x", bits.ReverseBytes32(icrc))
	if len(payload) > 0 {
		// The data dissector gets payload and pad.
		w[20] = hex.EncodeToString(append(append([]byte(nil), payload...), make([]byte, pad)...))
	}
	return w
}

// TestTsharkDecodesEveryOpcode writes one frame of every RC, UC and UD
// opcode, over IPv4 and over IPv6, and checks that tshark decodes every
// header field as built and reports nothing malformed.
func TestTsharkDecodesEveryOpcode(t *testing.T) {
	var ops []roce.Opcode
	for _, op := range allOpcodes() {
		if tr := op.Transport(); tr == roce.TransportRC || tr == roce.TransportUC || tr == roce.TransportUD {
			ops = append(ops, op)
		}
	}
	path := filepath.Join(t.TempDir(), "roce.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]string
	buf := make([]byte, 512)
	var frame []byte
	for _, cfg := range []roce.EncapConfig{
		{Src: netip.MustParseAddrPort("10.201.0.1:57236"), Dst: netip.MustParseAddrPort("10.201.0.2:4791")},
		{Src: netip.MustParseAddrPort("[fd00:5::1]:52433"), Dst: netip.MustParseAddrPort("[fd00:5::2]:4791"), FlowLabel: 0x12345},
	} {
		e, err := roce.NewEncap(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, op := range ops {
			h := realisticHeaders(op, i)
			payload := realisticPayload(op, i)
			n, err := roce.Build(buf, &h, payload)
			if err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			e.SetICRC(buf[:n])
			frame = e.AppendFrame(frame[:0], buf[:n])
			if err := w.WritePacket(time.Unix(1700000000, int64(len(want))*1000), frame); err != nil {
				t.Fatal(err)
			}
			want = append(want, wantFields(&h, payload, e.ICRC(buf[:n])))
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	tsharktest.CheckNoMalformed(t, path)
	got := tsharktest.Fields(t, path, tsharkFields)
	if len(got) != len(want) {
		t.Fatalf("tshark returned %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		for j, field := range tsharkFields {
			g := got[i][j]
			if field == "infiniband.ieth" || field == "infiniband.immdt" {
				g, _, _ = strings.Cut(g, ",") // the 4.0 dissector adds these items twice
			}
			if g != want[i][j] {
				t.Errorf("frame %d (%s): %s = %q, want %q", i+1, want[i][0], field, g, want[i][j])
			}
		}
	}
	// The opcode names tshark prints in the Info column agree with the
	// table's names ("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE" is shown as
	// "RC RDMA Write Last Immediate QP=0x0000c1").
	info := tsharktest.Fields(t, path, []string{"_ws.col.Info"})
	for i, op := range ops {
		got, _, _ := strings.Cut(info[i][0], "QP=")
		if got, want := strings.TrimSpace(got), wiresharkName(op); got != want {
			t.Errorf("%v: tshark calls it %q, want %q", op, got, want)
		}
	}
}

// wiresharkName converts a table name to the Info-column spelling of the
// Wireshark 4.0 infiniband dissector.
func wiresharkName(op roce.Opcode) string {
	words := strings.Split(strings.ReplaceAll(op.String(), "_WITH_", "_"), "_")
	for i, w := range words {
		if i > 0 && w != "RDMA" {
			words[i] = w[:1] + strings.ToLower(w[1:])
		}
	}
	return strings.Join(words, " ")
}
