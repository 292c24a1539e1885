package seqnum_test

import (
	"testing"

	"softib/internal/seqnum"
)

func TestPSNArith(t *testing.T) {
	tests := []struct {
		name string
		p    seqnum.PSN
		n    int
		want seqnum.PSN
	}{
		{"simple", 5, 3, 8},
		{"wrap", 0xFFFFFE, 3, 1},
		{"negative", 0, -1, 0xFFFFFF},
		{"negative wrap", 2, -5, 0xFFFFFD},
		{"full cycle", 7, seqnum.Modulus, 7},
	}
	for _, tt := range tests {
		if got := tt.p.Add(tt.n); got != tt.want {
			t.Errorf("%s: %d.Add(%d) = %d, want %d", tt.name, tt.p, tt.n, got, tt.want)
		}
	}
	if got := seqnum.PSN(0xFFFFFF).Next(); got != 0 {
		t.Errorf("Next wrap = %d", got)
	}
	if got := seqnum.PSN(0).Prev(); got != 0xFFFFFF {
		t.Errorf("Prev wrap = %d", got)
	}
	if got := seqnum.NewPSN(0xAB123456); got != 0x123456 {
		t.Errorf("NewPSN = %#x", got)
	}
	if got := seqnum.NewMSN(0xFF000001).Add(-2); got != 0xFFFFFF {
		t.Errorf("MSN Add = %#x", got)
	}
	if got := seqnum.MSN(0xFFFFFF).Next(); got != 0 {
		t.Errorf("MSN Next = %#x", got)
	}
}

func TestPSNCompare(t *testing.T) {
	tests := []struct {
		a, b   seqnum.PSN
		diff   int32
		less   bool
		lessEq bool
	}{
		{1, 2, -1, true, true},
		{2, 1, 1, false, false},
		{7, 7, 0, false, true},
		{0xFFFFFF, 0, -1, true, true},
		{0, 0xFFFFFF, 1, false, false},
		{0xFFFFF0, 0x10, -0x20, true, true},
		{0x10, 0xFFFFF0, 0x20, false, false},
		// Exactly half the space apart: the difference is -2^23, "before".
		{0, 0x800000, -0x800000, true, true},
		{0x800000, 0, -0x800000, true, true},
		{0x7FFFFF, 0, 0x7FFFFF, false, false},
	}
	for _, tt := range tests {
		if got := tt.a.Diff(tt.b); got != tt.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tt.a, tt.b, got, tt.diff)
		}
		if got := tt.a.Less(tt.b); got != tt.less {
			t.Errorf("%#x.Less(%#x) = %v, want %v", tt.a, tt.b, got, tt.less)
		}
		if got := tt.a.LessEq(tt.b); got != tt.lessEq {
			t.Errorf("%#x.LessEq(%#x) = %v, want %v", tt.a, tt.b, got, tt.lessEq)
		}
		m, mb := seqnum.MSN(tt.a), seqnum.MSN(tt.b)
		if m.Diff(mb) != tt.diff || m.Less(mb) != tt.less || m.LessEq(mb) != tt.lessEq {
			t.Errorf("MSN compare %#x vs %#x disagrees with PSN", tt.a, tt.b)
		}
	}
}

func TestPSNInWindow(t *testing.T) {
	tests := []struct {
		p, first seqnum.PSN
		n        uint32
		want     bool
	}{
		{5, 5, 1, true},
		{5, 5, 0, false},
		{6, 5, 1, false},
		{4, 5, 10, false},
		{14, 5, 10, true},
		{15, 5, 10, false},
		{0xFFFFFF, 0xFFFFFE, 4, true},
		{1, 0xFFFFFE, 4, true},
		{2, 0xFFFFFE, 4, false},
		{0xFFFFFD, 0xFFFFFE, 4, false},
		{123, 456, seqnum.Modulus, true},
	}
	for _, tt := range tests {
		if got := tt.p.InWindow(tt.first, tt.n); got != tt.want {
			t.Errorf("%#x.InWindow(%#x, %d) = %v, want %v", tt.p, tt.first, tt.n, got, tt.want)
		}
	}
}

func TestString(t *testing.T) {
	if s := seqnum.PSN(42).String(); s != "42" {
		t.Errorf("PSN String = %q", s)
	}
	if s := seqnum.MSN(7).String(); s != "7" {
		t.Errorf("MSN String = %q", s)
	}
}
