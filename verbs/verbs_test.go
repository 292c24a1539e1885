package verbs_test

import (
	"errors"
	"net/netip"
	"testing"

	"softib/verbs"
)

func TestModifyCheckRCPath(t *testing.T) {
	steps := []struct {
		name string
		cur  verbs.QPState
		attr verbs.QPAttr
		mask verbs.QPAttrMask
		want verbs.QPState
		err  error
	}{
		{"reset-init", verbs.QPStateReset, verbs.QPAttr{State: verbs.QPStateInit},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags, verbs.QPStateInit, nil},
		{"reset-init missing access", verbs.QPStateReset, verbs.QPAttr{State: verbs.QPStateInit},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort, verbs.QPStateReset, verbs.ErrInvalidAttr},
		{"reset-init qkey not for RC", verbs.QPStateReset, verbs.QPAttr{State: verbs.QPStateInit},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags | verbs.QPAttrQKey, verbs.QPStateReset, verbs.ErrInvalidAttr},
		{"init-rtr", verbs.QPStateInit, verbs.QPAttr{State: verbs.QPStateRTR},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer, verbs.QPStateRTR, nil},
		{"init-rts illegal", verbs.QPStateInit, verbs.QPAttr{State: verbs.QPStateRTS},
			verbs.QPAttrState, verbs.QPStateInit, verbs.ErrQPState},
		{"rtr-rts", verbs.QPStateRTR, verbs.QPAttr{State: verbs.QPStateRTS},
			verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
				verbs.QPAttrSQPSN | verbs.QPAttrMaxQPRdAtomic, verbs.QPStateRTS, nil},
		{"rtr-rtr illegal", verbs.QPStateRTR, verbs.QPAttr{}, 0, verbs.QPStateRTR, verbs.ErrQPState},
		{"rts-sqd", verbs.QPStateRTS, verbs.QPAttr{State: verbs.QPStateSQD}, verbs.QPAttrState, verbs.QPStateSQD, nil},
		{"sqd-rts", verbs.QPStateSQD, verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState, verbs.QPStateRTS, nil},
		{"sqe-rts not for RC", verbs.QPStateSQE, verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState, verbs.QPStateSQE, verbs.ErrQPState},
		{"any-err", verbs.QPStateRTS, verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState, verbs.QPStateErr, nil},
		{"err-reset", verbs.QPStateErr, verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState, verbs.QPStateReset, nil},
		{"err-rts illegal", verbs.QPStateErr, verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState, verbs.QPStateErr, verbs.ErrQPState},
		{"cur_state mismatch", verbs.QPStateRTR, verbs.QPAttr{State: verbs.QPStateRTS, CurState: verbs.QPStateInit},
			verbs.QPAttrState | verbs.QPAttrCurState, verbs.QPStateRTR, verbs.ErrQPState},
	}
	for _, s := range steps {
		got, err := verbs.ModifyCheck(verbs.QPTypeRC, s.cur, &s.attr, s.mask)
		if !errors.Is(err, s.err) || (err == nil) != (s.err == nil) {
			t.Errorf("%s: err = %v, want %v", s.name, err, s.err)
		}
		if got != s.want {
			t.Errorf("%s: state = %v, want %v", s.name, got, s.want)
		}
	}
}

func TestModifyCheckUD(t *testing.T) {
	a := verbs.QPAttr{State: verbs.QPStateInit}
	if _, err := verbs.ModifyCheck(verbs.QPTypeUD, verbs.QPStateReset, &a, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		t.Fatal(err)
	}
	a.State = verbs.QPStateRTR
	if _, err := verbs.ModifyCheck(verbs.QPTypeUD, verbs.QPStateInit, &a, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	a.State = verbs.QPStateRTS
	if _, err := verbs.ModifyCheck(verbs.QPTypeUD, verbs.QPStateRTR, &a, verbs.QPAttrState); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("RTR→RTS without SQ_PSN: %v", err)
	}
	if _, err := verbs.ModifyCheck(verbs.QPTypeUD, verbs.QPStateSQE, &a, verbs.QPAttrState); err != nil {
		t.Fatalf("UD SQE→RTS: %v", err)
	}
}

func TestGID(t *testing.T) {
	g := verbs.GIDFromAddr(netip.MustParseAddr("192.168.77.2"))
	if got, want := g.String(), "0000:0000:0000:0000:0000:ffff:c0a8:4d02"; got != want {
		t.Fatalf("GID %s, want %s", got, want)
	}
	if !g.IsIPv4() || g.Addr() != netip.MustParseAddr("192.168.77.2") {
		t.Fatalf("Addr %v", g.Addr())
	}
	p, err := verbs.ParseGID(g.String())
	if err != nil || p != g {
		t.Fatalf("ParseGID: %v %v", p, err)
	}
	if _, err := verbs.ParseGID("nonsense"); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("ParseGID(nonsense) = %v", err)
	}
	if ll := verbs.LinkLocalGID(0x0211_22ff_fe33_4455); ll.String() != "fe80:0000:0000:0000:0211:22ff:fe33:4455" {
		t.Fatalf("link-local %s", ll)
	}
}

func TestMTU(t *testing.T) {
	if verbs.MTUFromBytes(1500-80) != verbs.MTU1024 || verbs.MTU4096.Bytes() != 4096 || verbs.MTUFromBytes(100) != 0 {
		t.Fatal("MTU mapping")
	}
}

func TestWCError(t *testing.T) {
	wc := verbs.WC{Status: verbs.WCRemAccessErr, WRID: 7}
	if !errors.Is(wc.Err(), &verbs.WCError{Status: verbs.WCRemAccessErr}) {
		t.Fatal("errors.Is on WCError")
	}
	if (&verbs.WC{}).Err() != nil {
		t.Fatal("success has an error")
	}
}
