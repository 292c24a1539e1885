package e2etest_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"softib/internal/e2etest"
	"softib/internal/testaddr"
	"softib/internal/tsharktest"
)

// TestCapture: every datagram sent between StartCapture and Stop is in
// the file, with no wait in between; the probes are not malformed.
func TestCapture(t *testing.T) {
	a := testaddr.Next()
	rx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	port := rx.LocalAddr().(*net.UDPAddr).Port
	c := e2etest.StartCapture(t, "lo", fmt.Sprintf("udp and host %s and port %d", a, port))
	const n = 500
	for i := range n {
		if _, err := rx.WriteToUDP([]byte(fmt.Sprint("datagram ", i)), rx.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	c.Stop()
	rows := tsharktest.Fields(t, c.Path, []string{"frame.number"}, "-Y", fmt.Sprintf("udp.port == %d", port))
	if len(rows) != n {
		t.Fatalf("captured %d of %d datagrams", len(rows), n)
	}
	tsharktest.CheckNoMalformed(t, c.Path)
}

// TestSNMP reads a counter of this namespace.
func TestSNMP(t *testing.T) {
	before := e2etest.SNMP(t, nil, "Udp", "OutDatagrams")
	c, err := net.Dial("udp4", netip.AddrPortFrom(testaddr.Next(), 9).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	if after := e2etest.SNMP(t, nil, "Udp", "OutDatagrams"); after <= before {
		t.Fatalf("Udp OutDatagrams %d, then %d", before, after)
	}
}
