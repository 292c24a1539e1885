package devinfo_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"softib/tools/devinfo"
	"softib/verbs"
)

// fakeDev answers the queries devinfo makes; the other methods are not
// called.
type fakeDev struct{ verbs.Device }

func (fakeDev) Name() string { return "rxe0" }
func (fakeDev) Query() verbs.DeviceAttr {
	return verbs.DeviceAttr{NodeGUID: 0x505400fffe123456, SysImageGUID: 0x505400fffe123456, VendorID: 0xffffff,
		PhysPortCnt: 1, MaxQPRdAtom: 128, AtomicCap: verbs.AtomicHCA, DeviceCapFlags: 1<<1 | 1<<12, MaxMRSize: ^uint64(0)}
}
func (fakeDev) QueryPort(uint8) (verbs.PortAttr, error) {
	return verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU1024, GIDTblLen: 1024,
		LinkLayer: verbs.LinkLayerEthernet, MaxMsgSize: 0x800000, PKeyTblLen: 64, ActiveWidth: 1, ActiveSpeed: 1, PhysState: 5}, nil
}
func (fakeDev) GIDTable(uint8) ([]verbs.GIDEntry, error) {
	return []verbs.GIDEntry{
		{Index: 0, GID: verbs.LinkLocalGID(0x505400fffe123456), Type: verbs.GIDTypeRoCEv2},
		{Index: 1, GID: verbs.GIDFromAddr(netip.MustParseAddr("192.168.77.2")), Type: verbs.GIDTypeRoCEv2},
	}, nil
}
func (fakeDev) QueryPKey(uint8, int) (uint16, error) { return 0xffff, nil }

func TestWrite(t *testing.T) {
	in := devinfo.Collect(fakeDev{})
	var b bytes.Buffer
	devinfo.Write(&b, in, true)
	out := b.String()
	for _, want := range []string{
		"hca_id:\trxe0\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		"\tnode_guid:\t\t\t5054:00ff:fe12:3456\n",
		"\tvendor_id:\t\t\t0xffffff\n",
		"\tphys_port_cnt:\t\t\t1\n",
		"\tmax_qp_rd_atom:\t\t\t128\n",
		"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
		"\t\t\t\t\tBAD_PKEY_CNTR\n",
		"\t\tport:\t1\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tmax_mtu:\t\t4096 (5)\n",
		"\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tphys_state:\t\tLINK_UP (5)\n",
		"\t\t\tGID[  0]:\t\tfe80::5054:ff:fe12:3456, RoCE v2\n",
		"\t\t\tGID[  1]:\t\t::ffff:192.168.77.2, RoCE v2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
	b.Reset()
	devinfo.Write(&b, in, false)
	if strings.Contains(b.String(), "GID[") || strings.Contains(b.String(), "max_qp_rd_atom") {
		t.Errorf("short output has verbose fields:\n%s", b.String())
	}
	j, err := json.Marshal(in)
	if err != nil || !strings.Contains(string(j), `"addr":"192.168.77.2"`) || !strings.Contains(string(j), `"hca_id":"rxe0"`) {
		t.Errorf("json %s %v", j, err)
	}
}
