package cm_test

import (
	"net/netip"
	"testing"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// TestAHAttrFromPath: a RoCEv2 path's fields land in the address vector.
func TestAHAttrFromPath(t *testing.T) {
	p := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), TrafficClass: 0x60})
	a := cm.AHAttrFromPath(&p, 1, 4792)
	if a.GRH.DGID != verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.2")) || a.GRH.TrafficClass != 0x60 ||
		a.GRH.HopLimit != p.HopLimit || a.GRH.SGIDIndex != 1 || a.DPort != 4792 || !a.IsGlobal || a.PortNum != 1 {
		t.Errorf("AH %+v from path %+v", a, p)
	}
}
