package roce_test

import (
	"testing"
	"time"

	"softib/wire/roce"
)

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s       roce.Syndrome
		typ     roce.SyndromeType
		str     string
		ack     bool
		rnr     bool
		nak     bool
		credits int
		unl     bool
	}{
		{roce.SyndromeACKUnlimited, roce.SyndromeACK, "ACK(unlimited)", true, false, false, 0, true},
		{roce.ACKSyndrome(9), roce.SyndromeACK, "ACK(24 credits)", true, false, false, 24, false},
		{roce.ACKSyndrome(0), roce.SyndromeACK, "ACK(0 credits)", true, false, false, 0, false},
		{roce.RNRNAKSyndrome(14), roce.SyndromeRNRNAK, "RNR_NAK(1.28ms)", false, true, false, 0, false},
		{roce.NAKSyndrome(roce.NAKPSNSeqError), roce.SyndromeNAK, "NAK(PSN sequence error)", false, false, true, 0, false},
		{roce.NAKSyndrome(roce.NAKInvalidRDRequest), roce.SyndromeNAK, "NAK(invalid RD request)", false, false, true, 0, false},
		{0x45, roce.SyndromeReserved, "reserved syndrome 0x45", false, false, false, 0, false},
	}
	for _, tt := range tests {
		if tt.s.Type() != tt.typ || tt.s.String() != tt.str || tt.s.IsACK() != tt.ack ||
			tt.s.IsRNRNAK() != tt.rnr || tt.s.IsNAK() != tt.nak {
			t.Errorf("%#x: type %d %q", uint8(tt.s), tt.s.Type(), tt.s.String())
		}
		if tt.ack {
			if n, u := tt.s.Credits(); n != tt.credits || u != tt.unl {
				t.Errorf("%#x: credits %d %v", uint8(tt.s), n, u)
			}
		}
	}
	wantSyn := map[roce.NAKCode]roce.Syndrome{
		roce.NAKPSNSeqError: 0x60, roce.NAKInvalidRequest: 0x61, roce.NAKRemoteAccessError: 0x62,
		roce.NAKRemoteOpError: 0x63, roce.NAKInvalidRDRequest: 0x64,
	}
	for c, s := range wantSyn {
		if roce.NAKSyndrome(c) != s || s.NAKCode() != c || c.String() == "" {
			t.Errorf("NAK code %d", c)
		}
	}
	if roce.NAKCode(9).String() != "NAK code 9" {
		t.Error("unknown NAK code text")
	}
	if roce.RNRNAKSyndrome(14) != 0x2E || roce.Syndrome(0x2E).RNRTimer() != 14 {
		t.Error("RNR syndrome 0x2E")
	}
}

func TestCreditTable(t *testing.T) {
	want := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
		256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for c, n := range want {
		if got, unl := roce.CreditCodeToCredits(uint8(c)); got != n || unl {
			t.Errorf("code %d: %d %v", c, got, unl)
		}
		if roce.CreditsToCode(n) != uint8(c) {
			t.Errorf("CreditsToCode(%d) = %d", n, roce.CreditsToCode(n))
		}
	}
	if _, unl := roce.CreditCodeToCredits(31); !unl {
		t.Error("31 not unlimited")
	}
	if roce.CreditsToCode(5) != 4 || roce.CreditsToCode(100000) != 30 || roce.CreditsToCode(-1) != 0 {
		t.Error("CreditsToCode rounding")
	}
}

func TestRNRTimer(t *testing.T) {
	// roce-wire.md §6.2, in units of 10 µs.
	ms100 := []uint32{65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
		256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152}
	for c, v := range ms100 {
		r := roce.RNRTimer(c)
		if r.Microseconds() != v*10 || r.Duration() != time.Duration(v)*10*time.Microsecond {
			t.Errorf("code %d: %d µs", c, r.Microseconds())
		}
		if c != 0 && roce.RNRTimerFor(r.Duration()) != r {
			t.Errorf("RNRTimerFor(%v) = %d, want %d", r.Duration(), roce.RNRTimerFor(r.Duration()), c)
		}
	}
	cases := map[time.Duration]roce.RNRTimer{
		0: 1, time.Nanosecond: 1, 11 * time.Microsecond: 2, 1281 * time.Microsecond: 15,
		491520 * time.Microsecond: 31, 500 * time.Millisecond: 0, time.Hour: 0,
	}
	for d, want := range cases {
		if got := roce.RNRTimerFor(d); got != want {
			t.Errorf("RNRTimerFor(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestMTU(t *testing.T) {
	for m, n := range map[roce.MTU]int{roce.MTU256: 256, roce.MTU512: 512, roce.MTU1024: 1024, roce.MTU2048: 2048, roce.MTU4096: 4096} {
		if m.Bytes() != n || !m.Valid() || roce.MTUFromBytes(n) != m || roce.MTUFromBytes(n+100) != m {
			t.Errorf("MTU %d", m)
		}
		if m.String() == "invalid" {
			t.Errorf("MTU %d string", m)
		}
	}
	if roce.MTU(0).Bytes() != 0 || roce.MTU(6).Valid() || roce.MTUFromBytes(255) != 0 || roce.MTU(9).String() != "invalid" {
		t.Error("invalid MTU")
	}
	if roce.MTUForNetdev(1500) != roce.MTU1024 || roce.MTUForNetdev(9000) != roce.MTU4096 || roce.MTUForNetdev(4176) != roce.MTU4096 {
		t.Error("MTUForNetdev")
	}
}

func TestSrcPort(t *testing.T) {
	for qpn, want := range map[uint32]uint16{1: 55410, 17: 57236, 18: 63494} {
		if got := roce.SrcPortForQPN(qpn); got != want {
			t.Errorf("SrcPortForQPN(%d) = %d, want %d", qpn, got, want)
		}
	}
	if got := roce.SrcPortForFlow(0x11, 0xC1); got != 52433 {
		t.Errorf("SrcPortForFlow(0x11, 0xC1) = %d, want 52433", got)
	}
}
