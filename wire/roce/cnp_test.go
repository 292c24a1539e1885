package roce_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/pcap"
	"softib/internal/tsharktest"
	"softib/wire/roce"
)

func TestCNPBuildParse(t *testing.T) {
	b := make([]byte, 64)
	for i := range b {
		b[i] = 0xEE // BuildCNP must clear what it owns
	}
	n, err := roce.BuildCNP(b, 0xABCDEF, roce.DefaultPKey)
	if err != nil || n != roce.CNPLen || roce.CNPLen != 32 {
		t.Fatalf("BuildCNP = %d, %v; want 32", n, err)
	}
	c, err := roce.ParseCNP(b[:n])
	if err != nil {
		t.Fatal(err)
	}
	if c.DestQP() != 0xABCDEF || !c.BECN() || c.PKey() != roce.DefaultPKey || c.BTH().PSN() != 0 || c.BTH().FECN() || c.BTH().AckReq() {
		t.Fatalf("parsed %x: destqp %#x becn %v pkey %#x", b[:n], c.DestQP(), c.BECN(), c.PKey())
	}
	if c.BTH().Opcode() != roce.CNP || roce.CNP.String() != "CNP" {
		t.Fatalf("opcode %v", c.BTH().Opcode())
	}
	for i := roce.BTHSize; i < n; i++ {
		if b[i] != 0 {
			t.Fatalf("byte %d = %#x, want 0", i, b[i])
		}
	}
	// The generic parser agrees: a 16-byte payload.
	p, err := roce.Parse(b[:n])
	if err != nil || p.PayloadLen() != roce.CNPPayloadSize {
		t.Fatalf("Parse: %v, payload %d", err, p.PayloadLen())
	}
	if _, err := roce.BuildCNP(b[:31], 1, roce.DefaultPKey); !errors.Is(err, roce.ErrShortBuffer) {
		t.Fatalf("short buffer: %v", err)
	}
}

func TestParseCNPErrors(t *testing.T) {
	cnp := make([]byte, roce.CNPLen)
	roce.BuildCNP(cnp, 5, roce.DefaultPKey)
	ack := make([]byte, 64)
	h := roce.Headers{BTH: roce.BTHFields{Opcode: roce.RCAck, PKey: roce.DefaultPKey, DestQP: 5}}
	n, err := roce.Build(ack, &h, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := append(append([]byte(nil), cnp[:roce.CNPLen-roce.ICRCSize]...), make([]byte, 4+roce.ICRCSize)...)
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"not CNP", ack[:n], roce.ErrUnknownOpcode},
		{"short", cnp[:roce.CNPLen-4], roce.ErrTruncated},
		{"long", long, roce.ErrUnexpectedPayload},
		{"empty", nil, roce.ErrTruncated},
	} {
		if _, err := roce.ParseCNP(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzParseCNP(f *testing.F) {
	cnp := make([]byte, roce.CNPLen)
	roce.BuildCNP(cnp, 0x11, roce.DefaultPKey)
	f.Add(cnp)
	f.Add(cnp[:20])
	f.Add(append(append([]byte(nil), cnp...), 0, 0, 0, 0))
	f.Add([]byte{0x81})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := roce.ParseCNP(b)
		if err != nil {
			if _, ok := err.(roce.ParseError); !ok {
				t.Fatalf("error %v is not a ParseError", err)
			}
			return
		}
		if len(b) != roce.CNPLen {
			t.Fatalf("accepted %d bytes", len(b))
		}
		out := make([]byte, roce.CNPLen)
		roce.BuildCNP(out, c.DestQP(), c.PKey())
		if c2, err := roce.ParseCNP(out); err != nil || c2.DestQP() != c.DestQP() {
			t.Fatalf("rebuild: %v", err)
		}
	})
}

// TestTsharkDecodesCNP: Wireshark dissects a CNP's BTH as built (opcode
// 129, DestQP, PSN 0), over IPv4 and IPv6, and finds nothing malformed.
// Wireshark 4.0 (Debian 12, this host) has no name for opcode 0x81: its
// Info column says "Unknown OpCode" (and it shows no BECN field: byte 4
// is reserved to it); a later one that names it CNP passes too.
func TestTsharkDecodesCNP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cnp.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, roce.CNPLen)
	var frame []byte
	for i, cfg := range []roce.EncapConfig{
		{Src: netip.MustParseAddrPort("10.201.0.2:52433"), Dst: netip.MustParseAddrPort("10.201.0.1:4791"), TOS: 0x02},
		{Src: netip.MustParseAddrPort("[fd00:5::2]:52433"), Dst: netip.MustParseAddrPort("[fd00:5::1]:4791")},
	} {
		e, err := roce.NewEncap(cfg)
		if err != nil {
			t.Fatal(err)
		}
		roce.BuildCNP(buf, 0xC1+uint32(i), roce.DefaultPKey)
		e.SetICRC(buf)
		frame = e.AppendFrame(frame[:0], buf)
		if err := w.WritePacket(time.Unix(1700000000, int64(i)*1000), frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tsharktest.CheckNoMalformed(t, path)
	got := tsharktest.Fields(t, path, []string{"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "_ws.col.Info"})
	if len(got) != 2 {
		t.Fatalf("%d rows, want 2", len(got))
	}
	for i, row := range got {
		if row[0] != "129" || row[1] != []string{"0x0000c1", "0x0000c2"}[i] || row[2] != "0" || !(strings.Contains(row[3], "CNP") || strings.Contains(row[3], "Unknown OpCode")) {
			t.Errorf("frame %d: %q", i+1, row)
		}
	}
}
