package roce

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (IBTA Vol 1 §9.7.5.1.1, Table 43):
// bit 7 reserved, bits 6:5 the type (ACK, RNR NAK, NAK), bits 4:0 a credit
// code, RNR timer code or NAK code.
type Syndrome uint8

// SyndromeType is bits 6:5 of a Syndrome.
type SyndromeType uint8

// Syndrome types.
const (
	SyndromeACK      SyndromeType = 0
	SyndromeRNRNAK   SyndromeType = 1
	SyndromeReserved SyndromeType = 2
	SyndromeNAK      SyndromeType = 3
)

// CreditsUnlimited is the ACK credit code meaning "no credit information";
// rxe sends it in every ACK.
const CreditsUnlimited = 31

// SyndromeACKUnlimited is the syndrome rxe puts in every ACK (0x1F).
const SyndromeACKUnlimited Syndrome = CreditsUnlimited

// NAKCode is the value of a NAK syndrome (type 11).
type NAKCode uint8

// NAK codes (IBTA Vol 1 §9.7.5.1.1).
const (
	NAKPSNSeqError       NAKCode = 0 // syndrome 0x60
	NAKInvalidRequest    NAKCode = 1 // syndrome 0x61
	NAKRemoteAccessError NAKCode = 2 // syndrome 0x62
	NAKRemoteOpError     NAKCode = 3 // syndrome 0x63
	NAKInvalidRDRequest  NAKCode = 4 // syndrome 0x64
)

// String names the NAK code.
func (c NAKCode) String() string {
	switch c {
	case NAKPSNSeqError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOpError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "NAK code " + strconv.Itoa(int(c))
}

// ACKSyndrome returns an ACK syndrome carrying credit code c (0..31).
func ACKSyndrome(c uint8) Syndrome { return Syndrome(c & 0x1F) }

// RNRNAKSyndrome returns an RNR NAK syndrome (0x20 | timer code).
func RNRNAKSyndrome(t RNRTimer) Syndrome { return Syndrome(0x20 | uint8(t)&0x1F) }

// NAKSyndrome returns a NAK syndrome (0x60 | code).
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1F) }

// Type returns the syndrome type.
func (s Syndrome) Type() SyndromeType { return SyndromeType(s>>5) & 3 }

// Value returns the low five bits: credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s.Type() == SyndromeACK }

// IsRNRNAK reports whether s is a receiver-not-ready NAK.
func (s Syndrome) IsRNRNAK() bool { return s.Type() == SyndromeRNRNAK }

// IsNAK reports whether s is a NAK (not counting RNR NAK).
func (s Syndrome) IsNAK() bool { return s.Type() == SyndromeNAK }

// Credits decodes the credit code of an ACK syndrome. unlimited is true for
// code 31. The result is meaningless unless IsACK.
func (s Syndrome) Credits() (n int, unlimited bool) { return CreditCodeToCredits(s.Value()) }

// RNRTimer returns the timer code of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() RNRTimer { return RNRTimer(s.Value()) }

// NAKCode returns the code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String describes the syndrome, e.g. "ACK(unlimited)", "RNR_NAK(1.28ms)",
// "NAK(remote access error)".
func (s Syndrome) String() string {
	switch s.Type() {
	case SyndromeACK:
		if n, unl := s.Credits(); !unl {
			return "ACK(" + strconv.Itoa(n) + " credits)"
		}
		return "ACK(unlimited)"
	case SyndromeRNRNAK:
		return "RNR_NAK(" + s.RNRTimer().Duration().String() + ")"
	case SyndromeNAK:
		return "NAK(" + s.NAKCode().String() + ")"
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// creditTable maps ACK credit codes 0..30 to credit counts (IBTA Vol 1
// §9.7.7.2.4, Table 45).
var creditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCodeToCredits returns the number of credits of credit code c;
// unlimited is true for code 31 (and anything larger).
func CreditCodeToCredits(c uint8) (n int, unlimited bool) {
	if c >= CreditsUnlimited {
		return 0, true
	}
	return int(creditTable[c]), false
}

// CreditsToCode returns the largest credit code whose credit count does not
// exceed n (so an advertiser never promises more than it has).
func CreditsToCode(n int) uint8 {
	c := uint8(0)
	for i, v := range creditTable {
		if int(v) <= n {
			c = uint8(i)
		}
	}
	return c
}

// RNRTimer is a 5-bit RNR NAK timer code (IBTA Vol 1 §9.7.5.2.8, Table 46):
// the minimum time the requester waits before retrying.
type RNRTimer uint8

// rnrMicros maps RNR timer codes to microseconds. Linux rxe's table has
// 61410 µs for code 25 (a typo); the IBTA value 61440 is used here.
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// Microseconds returns the delay of timer code t (codes wrap at 32).
func (t RNRTimer) Microseconds() uint32 { return rnrMicros[t&0x1F] }

// Duration returns the delay of timer code t.
func (t RNRTimer) Duration() time.Duration {
	return time.Duration(t.Microseconds()) * time.Microsecond
}

// RNRTimerFor returns the code of the shortest delay that is at least d.
// Delays above 655.36 ms saturate to code 0 (the longest).
func RNRTimerFor(d time.Duration) RNRTimer {
	us := d.Microseconds()
	if d > time.Duration(us)*time.Microsecond {
		us++ // round up
	}
	for c := 1; c < 32; c++ {
		if int64(rnrMicros[c]) >= us {
			return RNRTimer(c)
		}
	}
	return 0
}
