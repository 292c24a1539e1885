// Package devinfo formats a device's attributes like rdma-core's
// ibv_devinfo (field names, order and layout), and as JSON.
package devinfo

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"softib/verbs"
)

// Port is one port's attributes and GID table.
type Port struct {
	Num  uint8            `json:"port"`
	Attr verbs.PortAttr   `json:"attr"`
	GIDs []verbs.GIDEntry `json:"-"`
	GIDJ []GIDJSON        `json:"gids"`
	PKey []uint16         `json:"pkeys,omitempty"`
	Err  string           `json:"error,omitempty"`
}

// GIDJSON is a GID table entry in JSON.
type GIDJSON struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	Addr  string `json:"addr"`
	Type  string `json:"type"`
}

// Info is everything devinfo shows about a device.
type Info struct {
	Name  string           `json:"hca_id"`
	Attr  verbs.DeviceAttr `json:"attr"`
	Ports []Port           `json:"ports"`
	// ECN is the device's RoCEv2 congestion control, for devices that
	// have it (softib's Soft-RoCE); nil for others (a kernel device's is
	// its driver's, not visible through verbs). It is the setting of the
	// device this process opened (devinfo's own --ecn): a Soft-RoCE
	// device is a process's, not the host's.
	ECN *ECN `json:"ecn,omitempty"`
	// Addr is the Soft-RoCE device address asked for (CollectAt; the
	// device's own by default).
	Addr netip.AddrPort `json:"addr,omitzero"`
	// Running lists the other softib processes that hold a device at
	// Addr (their softib stat snapshots) with their devices' congestion
	// control: what the traffic on that address gets. The ecn line shows
	// theirs when there are any.
	Running []Running `json:"running,omitempty"`
}

// Running is another process's device at the same address.
type Running struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	ECN  *ECN   `json:"ecn"`
}

// Collect queries dev.
func Collect(dev verbs.Device) *Info { return CollectAt(dev, netip.AddrPort{}) }

// CollectAt is Collect for the Soft-RoCE device address want (invalid:
// dev's own): a softib device belongs to the process that opened it, so
// when another process holds want (and dev had to take another address,
// as devsel.Options.Open does when the default address is taken) the
// ecn line shows that process's setting (Info.Running).
func CollectAt(dev verbs.Device, want netip.AddrPort) *Info { return collect(dev, want, os.Getpid()) }

// collect is CollectAt with self the process whose stat sockets Running
// leaves out (this one's: its device is dev).
func collect(dev verbs.Device, want netip.AddrPort, self int) *Info {
	in := &Info{Name: dev.Name(), Attr: dev.Query()}
	if e, ok := dev.(ecnDevice); ok {
		in.ECN = ecnOf(e.ECN())
		if a, ok := dev.(interface{ Addr() netip.AddrPort }); ok && !want.IsValid() {
			want = a.Addr()
		}
		if want.IsValid() {
			in.Addr = want
			in.Running = running(want, self)
		}
	}
	for p := uint8(1); p <= max(in.Attr.PhysPortCnt, 1); p++ {
		pt := Port{Num: p}
		pa, err := dev.QueryPort(p)
		if err != nil {
			pt.Err = err.Error()
			in.Ports = append(in.Ports, pt)
			continue
		}
		pt.Attr = pa
		pt.GIDs, _ = dev.GIDTable(p)
		for _, g := range pt.GIDs {
			pt.GIDJ = append(pt.GIDJ, GIDJSON{Index: g.Index, GID: g.GID.String(), Addr: g.GID.Addr().String(), Type: g.Type.String()})
		}
		if k, err := dev.QueryPKey(p, 0); err == nil {
			pt.PKey = append(pt.PKey, k)
		}
		in.Ports = append(in.Ports, pt)
	}
	return in
}

func guid(v uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", v>>48, v>>32&0xffff, v>>16&0xffff, v&0xffff)
}

func mtuStr(m verbs.MTU) string {
	if !m.Valid() {
		return fmt.Sprintf("invalid MTU (%d)", m)
	}
	return fmt.Sprintf("%d (%d)", m.Bytes(), m)
}

var capNames = []struct {
	bit  uint64
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"}, {1 << 1, "BAD_PKEY_CNTR"}, {1 << 2, "BAD_QKEY_CNTR"}, {1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"}, {1 << 5, "CHANGE_PHY_PORT"}, {1 << 6, "UD_AV_PORT_ENFORCE"}, {1 << 7, "CURR_QP_STATE_MOD"},
	{1 << 8, "SHUTDOWN_PORT"}, {1 << 9, "INIT_TYPE"}, {1 << 10, "PORT_ACTIVE_EVENT"}, {1 << 11, "SYS_IMAGE_GUID"},
	{1 << 12, "RC_RNR_NAK_GEN"}, {1 << 13, "SRQ_RESIZE"}, {1 << 14, "N_NOTIFY_CQ"}, {1 << 17, "MEM_WINDOW"},
	{1 << 18, "UD_IP_CSUM"}, {1 << 20, "XRC"}, {1 << 21, "MEM_MGT_EXTENSIONS"}, {1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"}, {1 << 25, "RC_IP_CSUM"}, {1 << 26, "XRC"}, {1 << 29, "MANAGED_FLOW_STEERING"},
}

func portState(s verbs.PortState) string { return fmt.Sprintf("%s (%d)", s, s) }

func physState(s uint8) string {
	names := map[uint8]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION_TRAINING", 5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY_TEST"}
	if n, ok := names[s]; ok {
		return fmt.Sprintf("%s (%d)", n, s)
	}
	return fmt.Sprintf("invalid physical state (%d)", s)
}

func width(w uint8) string {
	names := map[uint8]string{1: "1X", 2: "4X", 4: "8X", 8: "12X", 16: "2X"}
	if n, ok := names[w]; ok {
		return fmt.Sprintf("%s (%d)", n, w)
	}
	return fmt.Sprintf("invalid width (%d)", w)
}

func speed(s uint8) string {
	names := map[uint8]string{1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps", 32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps"}
	if n, ok := names[s]; ok {
		return fmt.Sprintf("%s (%d)", n, s)
	}
	return fmt.Sprintf("invalid speed (%d)", s)
}

func vlNum(n uint8) string {
	names := map[uint8]string{1: "1", 2: "2", 3: "4", 4: "8", 5: "15"}
	if s, ok := names[n]; ok {
		return fmt.Sprintf("%s (%d)", s, n)
	}
	return fmt.Sprintf("invalid value (%d)", n)
}

// Write prints in like ibv_devinfo (verbose adds what -v adds).
func Write(w io.Writer, in *Info, verbose bool) {
	var b strings.Builder
	a := &in.Attr
	line := func(name, val string) {
		// ibv_devinfo aligns device values at column 40.
		pad := strings.Repeat("\t", max(1, 5-(8+len(name)+1)/8))
		fmt.Fprintf(&b, "\t%s:%s%s\n", name, pad, val)
	}
	fmt.Fprintf(&b, "hca_id:\t%s\n", in.Name)
	line("transport", "InfiniBand (0)")
	fw := a.FWVer
	if fw == "" {
		fw = "0.0.0"
	}
	line("fw_ver", fw)
	line("node_guid", guid(a.NodeGUID))
	line("sys_image_guid", guid(a.SysImageGUID))
	line("vendor_id", fmt.Sprintf("0x%04x", a.VendorID))
	line("vendor_part_id", fmt.Sprint(a.VendorPartID))
	line("hw_ver", fmt.Sprintf("0x%X", a.HWVer))
	line("phys_port_cnt", fmt.Sprint(a.PhysPortCnt))
	if in.ECN != nil {
		writeECN(&b, in, line, verbose)
	}
	if verbose {
		line("max_mr_size", fmt.Sprintf("0x%x", a.MaxMRSize))
		line("page_size_cap", fmt.Sprintf("0x%x", a.PageSizeCap))
		line("max_qp", fmt.Sprint(a.MaxQP))
		line("max_qp_wr", fmt.Sprint(a.MaxQPWR))
		line("device_cap_flags", fmt.Sprintf("0x%08x", a.DeviceCapFlags))
		for _, c := range capNames {
			if a.DeviceCapFlags&c.bit != 0 {
				fmt.Fprintf(&b, "\t\t\t\t\t%s\n", c.name)
			}
		}
		for _, f := range []struct {
			n string
			v int
		}{{"max_sge", a.MaxSGE}, {"max_sge_rd", a.MaxSGERd}, {"max_cq", a.MaxCQ}, {"max_cqe", a.MaxCQE},
			{"max_mr", a.MaxMR}, {"max_pd", a.MaxPD}, {"max_qp_rd_atom", a.MaxQPRdAtom}, {"max_ee_rd_atom", a.MaxEERdAtom},
			{"max_res_rd_atom", a.MaxResRdAtom}, {"max_qp_init_rd_atom", a.MaxQPInitRdAtom},
			{"max_ee_init_rd_atom", a.MaxEEInitRdAtom}} {
			line(f.n, fmt.Sprint(f.v))
		}
		line("atomic_cap", fmt.Sprintf("%s (%d)", a.AtomicCap, a.AtomicCap))
		for _, f := range []struct {
			n string
			v int
		}{{"max_ee", a.MaxEE}, {"max_rdd", a.MaxRDD}, {"max_mw", a.MaxMW}, {"max_raw_ipv6_qp", a.MaxRawIPv6QP},
			{"max_raw_ethy_qp", a.MaxRawEthyQP}, {"max_mcast_grp", a.MaxMcastGrp}, {"max_mcast_qp_attach", a.MaxMcastQPAttach},
			{"max_total_mcast_qp_attach", a.MaxTotalMcastQPAttach}, {"max_ah", a.MaxAH}, {"max_fmr", a.MaxFMR},
			{"max_map_per_fmr", a.MaxMapPerFMR}, {"max_srq", a.MaxSRQ}, {"max_srq_wr", a.MaxSRQWR},
			{"max_srq_sge", a.MaxSRQSGE}, {"max_pkeys", a.MaxPKeys}} {
			line(f.n, fmt.Sprint(f.v))
		}
		line("local_ca_ack_delay", fmt.Sprint(a.LocalCAAckDelay))
	}
	for _, p := range in.Ports {
		fmt.Fprintf(&b, "\t\tport:\t%d\n", p.Num)
		if p.Err != "" {
			fmt.Fprintf(&b, "\t\t\terror:\t\t\t%s\n", p.Err)
			continue
		}
		pa := &p.Attr
		pl := func(name, val string) {
			// Port values align at column 48.
			pad := strings.Repeat("\t", max(1, 6-(24+len(name)+1)/8))
			fmt.Fprintf(&b, "\t\t\t%s:%s%s\n", name, pad, val)
		}
		pl("state", portState(pa.State))
		pl("max_mtu", mtuStr(pa.MaxMTU))
		pl("active_mtu", mtuStr(pa.ActiveMTU))
		pl("sm_lid", fmt.Sprint(pa.SMLID))
		pl("port_lid", fmt.Sprint(pa.LID))
		pl("port_lmc", fmt.Sprintf("0x%02x", pa.LMC))
		pl("link_layer", pa.LinkLayer.String())
		if verbose {
			pl("max_msg_sz", fmt.Sprintf("0x%x", pa.MaxMsgSize))
			pl("port_cap_flags", fmt.Sprintf("0x%08x", pa.PortCapFlags))
			pl("port_cap_flags2", "0x0000")
			pl("max_vl_num", vlNum(pa.MaxVLNum))
			pl("bad_pkey_cntr", fmt.Sprintf("0x%x", pa.BadPKeyCntr))
			pl("qkey_viol_cntr", fmt.Sprintf("0x%x", pa.QKeyViolCntr))
			pl("sm_sl", fmt.Sprint(pa.SMSL))
			pl("pkey_tbl_len", fmt.Sprint(pa.PKeyTblLen))
			pl("gid_tbl_len", fmt.Sprint(pa.GIDTblLen))
			pl("subnet_timeout", fmt.Sprint(pa.SubnetTimeout))
			pl("init_type_reply", fmt.Sprint(pa.InitTypeReply))
			pl("active_width", width(pa.ActiveWidth))
			pl("active_speed", speed(pa.ActiveSpeed))
			pl("phys_state", physState(pa.PhysState))
			for _, g := range p.GIDs {
				fmt.Fprintf(&b, "\t\t\tGID[%3d]:\t\t%s, %s\n", g.Index, netip.AddrFrom16(g.GID).String(), g.Type)
			}
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}
