package lnetwire_test

import (
	"testing"

	"softib/wire/lnetwire"
)

// kernelPush is a ping buffer as a Lustre 2.17 kernel node with discovery
// on pushes it (and answers pings with): features NI_STATUS | RTE_DISABLED
// | MULTI_RAIL | DISCOVERY (0x1e), pid 12345, 0@lo carrying sequence 3,
// then 192.168.77.2@tcp and 192.168.77.2@o2ib up. Little-endian, written
// out byte by byte from lnet-wire.md §5.2–5.3.
var kernelPush = []byte{
	0x67, 0x6e, 0x69, 0x70, // pi_magic 0x70696e67
	0x1e, 0x00, 0x00, 0x00, // pi_features
	0x39, 0x30, 0x00, 0x00, // pi_pid 12345
	0x03, 0x00, 0x00, 0x00, // pi_nnis
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00, // 0@lo
	0x03, 0x00, 0x00, 0x00, // status: the sequence number
	0x00, 0x00, 0x00, 0x00, // msg_size
	0x02, 0x4d, 0xa8, 0xc0, 0x00, 0x00, 0x02, 0x00, // 192.168.77.2@tcp
	0xde, 0xc0, 0xaa, 0x15, // LNET_NI_STATUS_UP
	0x00, 0x00, 0x00, 0x00,
	0x02, 0x4d, 0xa8, 0xc0, 0x00, 0x00, 0x05, 0x00, // 192.168.77.2@o2ib
	0xde, 0xc0, 0xaa, 0x15,
	0x00, 0x00, 0x00, 0x00,
}

func TestPingInfoKernelVector(t *testing.T) {
	p, err := lnetwire.ParsePingInfo(kernelPush)
	if err != nil {
		t.Fatal(err)
	}
	want := lnetwire.PingFeatNIStatus | lnetwire.PingFeatRteDisabled | lnetwire.PingFeatMultiRail | lnetwire.PingFeatDiscovery
	if p.Features != want || p.PID != 12345 || len(p.NIs) != 3 {
		t.Fatalf("decoded %+v", p)
	}
	if p.Seq() != 3 || p.Primary() != lnetwire.MustParseNID("192.168.77.2@tcp") ||
		p.NIs[2].NID != lnetwire.MustParseNID("192.168.77.2@o2ib") || p.NIs[2].Status != lnetwire.PingStatusUp {
		t.Fatalf("seq %d primary %v entries %+v", p.Seq(), p.Primary(), p.NIs)
	}
	if got := p.Append(nil); string(got) != string(kernelPush) {
		t.Fatalf("re-encoded\n%x\nwant\n%x", got, kernelPush)
	}
	// Bytes after the entries (a large-NID extension) are ignored.
	ext := append(append([]byte(nil), kernelPush...), make([]byte, 24)...)
	if q, err := lnetwire.ParsePingInfo(ext); err != nil || !samePing(q, p) {
		t.Fatalf("with trailing bytes: %+v %v", q, err)
	}
	var empty lnetwire.PingInfo
	if empty.Seq() != 0 || empty.Primary() != lnetwire.NIDAny {
		t.Fatalf("empty: seq %d primary %v", empty.Seq(), empty.Primary())
	}
}
