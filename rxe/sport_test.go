package rxe

import (
	"testing"

	"softib/verbs"
)

// refHash is hash_32(v, 14) as roce-wire.md §1.1 states it.
func refHash(v uint32) uint32 { return uint32(uint64(v)*0x61C88647%(1<<32)) >> (32 - 14) }

// refFlowSport is the flow-label form of roce-wire.md §1.1, step by step.
func refFlowSport(l, r uint32) uint16 {
	fl := uint64(l) * uint64(r)
	fl ^= fl >> 20
	fl ^= fl >> 40
	fl &= 0xFFFFF
	return uint16(0xC000 | ((fl & 0x3FFF) ^ (fl >> 14)))
}

// TestSourcePortVectors checks the source ports against every worked
// value of roce-wire.md §1.1 and against the formulas it states.
func TestSourcePortVectors(t *testing.T) {
	for _, v := range []struct {
		lqpn, rqpn uint32
		want       uint16
	}{
		{1, 0, 55410},    // GSI
		{0x11, 0, 57236}, // first user QP
		{0x12, 0, 63494},
		{0x11, 0xC1, 52433}, // connected, Linux 6.1
	} {
		if got := SourcePort(v.lqpn, v.rqpn); got != v.want {
			t.Errorf("SourcePort(%#x, %#x) = %d, want %d", v.lqpn, v.rqpn, got, v.want)
		}
	}
	if got := qpSourcePort(verbs.QPTypeGSI, 1, 0, 0); got != 55410 {
		t.Errorf("GSI QP sends from %d, want 55410", got)
	}
	if got := qpSourcePort(verbs.QPTypeRC, 0x11, 0xC1, 0); got != 52433 {
		t.Errorf("RC QP 0x11 → 0xC1 sends from %d, want 52433", got)
	}
	// Every QPN, in particular the 24-bit extremes: the formulas of
	// roce-wire.md, and the port range.
	for _, l := range []uint32{1, 2, 0x11, 0x12, 0x13, 0xC1, 0x1234, 0x7FFFFF, 0xFFFFFE, 0xFFFFFF} {
		want := uint16(0xC000 + refHash(l)&0x3FFF)
		for _, typ := range []verbs.QPType{verbs.QPTypeUD, verbs.QPTypeGSI} {
			// UD and GSI QPs never use a remote QPN.
			if got := qpSourcePort(typ, l, 0x55, 0); got != want {
				t.Errorf("%v QP %#x: port %d, want %d", typ, l, got, want)
			}
		}
		for _, r := range []uint32{1, 0x11, 0xC1, 0x10000, 0xABCDEF, 0xFFFFFF} {
			want := refFlowSport(l, r)
			for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC} {
				if got := qpSourcePort(typ, l, r, 0); got != want || got < 0xC000 {
					t.Errorf("%v QP %#x → %#x: port %d, want %d", typ, l, r, got, want)
				}
			}
		}
	}
}

// TestFlowLabelSourcePort checks the port of an address vector that
// carries its own flow label: the label replaces the QPN product
// (rdma_get_udp_sport), its bits above 20 are ignored.
func TestFlowLabelSourcePort(t *testing.T) {
	for _, fl := range []uint32{1, 0x3FFF, 0x4000, 0xCD1, 0x12345, 0xFFFFF} {
		want := uint16(0xC000 | (fl&0x3FFF ^ fl>>14))
		if got := qpSourcePort(verbs.QPTypeRC, 0x11, 0xC1, fl); got != want {
			t.Errorf("flow label %#x: port %d, want %d", fl, got, want)
		}
		if got := qpSourcePort(verbs.QPTypeRC, 0x11, 0xC1, fl|0xFFF00000); got != want {
			t.Errorf("flow label %#x with high bits: port %d, want %d", fl, got, want)
		}
		if got := qpSourcePort(verbs.QPTypeUD, 0x11, 0, fl); got != SourcePort(0x11, 0) {
			t.Errorf("UD with flow label %#x: port %d, want the hash form", fl, got)
		}
	}
	// 0x11 × 0xC1 = 0xCD1: an explicit label equal to the derived one
	// gives the same port as none.
	if a, b := qpSourcePort(verbs.QPTypeRC, 0x11, 0xC1, 0xCD1), SourcePort(0x11, 0xC1); a != b {
		t.Errorf("label 0xCD1 gives %d, derived label %d", a, b)
	}
}
