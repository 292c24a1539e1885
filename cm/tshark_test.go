package cm_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"softib/cm"
	"softib/internal/pcap"
	"softib/internal/seqnum"
	"softib/internal/tsharktest"
	"softib/verbs"
	"softib/wire/mad"
	"softib/wire/roce"
)

// writeGSIPcap wraps every MAD the network carried into a RoCEv2 UD
// SEND_ONLY frame to QP1 (Q_Key 0x80010000, source QP 1, P_Key 0xFFFF,
// correct ICRC) and writes them to a pcap.
func writeGSIPcap(t *testing.T, n *memNet, path string) []sentMAD {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	sent := append([]sentMAD(nil), n.sent...)
	n.mu.Unlock()
	buf := make([]byte, 512)
	var frame []byte
	for i, s := range sent {
		h := roce.Headers{
			BTH:  roce.BTHFields{Opcode: roce.UDSendOnly, PKey: mad.DefaultPKey, DestQP: mad.GSIQPN, PSN: seqnum.PSN(i)},
			DETH: roce.DETHFields{QKey: mad.GSIQKey, SrcQP: mad.GSIQPN},
		}
		k, err := roce.Build(buf, &h, s.b)
		if err != nil {
			t.Fatal(err)
		}
		e, err := roce.NewEncap(roce.EncapConfig{
			Src: netip.AddrPortFrom(s.from.Addr(), roce.SrcPortForQPN(1)),
			Dst: netip.AddrPortFrom(s.to.Addr(), roce.UDPPort),
		})
		if err != nil {
			t.Fatal(err)
		}
		e.SetICRC(buf[:k])
		if k != 12+8+256+4 {
			t.Fatalf("UD GSI packet %d bytes, want 280", k)
		}
		frame = e.AppendFrame(frame[:0], buf[:k])
		if err := w.WritePacket(time.Unix(1700000000, int64(i)*1000), frame); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return sent
}

// TestTsharkDecodesCM runs an RDMA-CM-style session (REQ with cma_hdr,
// MRA, REP, RTU, LAP/APR, DREQ/DREP, REJ, SIDR) through two CMs, captures
// every MAD in RoCEv2 frames and checks tshark's decode.
func TestTsharkDecodesCM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cm.pcap")
	var sent []sentMAD
	var rdmaSrcPort uint16 = 47123
	synctest.Test(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.201.0.1", cm.Config{})
		b := n.node(t, "10.201.0.2", cm.Config{})
		sid := mad.ServiceID(mad.PSTCP, 7174)
		b.listen(sid)
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			switch ev.Type {
			case cm.EventREQReceived:
				if ev.REQ.LocalQPN == 0x66 {
					return id.SendREJ(mad.RejConsumerDefined, nil, []byte("busy"))
				}
				if err := id.SendMRA(20, nil); err != nil {
					return err
				}
				return id.SendREP(&cm.REPParam{QPN: 0x2A, StartingPSN: 0x654321, ResponderResources: 1,
					InitiatorDepth: 1, RNRRetryCount: 7, PrivateData: []byte("accept")})
			case cm.EventLAPReceived:
				return id.SendAPR(mad.APRSuccess, nil, nil)
			case cm.EventDREQReceived:
				return id.SendDREP(nil)
			case cm.EventSIDRREQReceived:
				return id.SendSIDRREP(&cm.SIDRREPParam{QPN: 0x99, QKey: mad.RDMAUDPQKey})
			}
			return nil
		})
		rtuOnREP(a)
		hdr := mad.CMAHdr{SrcPort: rdmaSrcPort, Src: a.ip, Dst: b.ip}
		pd := append(hdr.Append(nil), []byte("user data")...)
		p := reqParam(a, b, 0x11)
		p.ServiceID, p.PrivateData = sid, pd
		ca := a.newID()
		if err := ca.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		alt := p.Primary
		if err := ca.SendLAP(&alt, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := ca.SendDREQ(nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		p2 := reqParam(a, b, 0x66)
		p2.ServiceID, p2.PrivateData = sid, pd
		if err := a.newID().SendREQ(p2); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sidr := a.newID()
		if err := sidr.SendSIDRREQ(&cm.SIDRREQParam{Path: p.Primary, ServiceID: mad.ServiceID(mad.PSUDP, 5000),
			PrivateData: pd}); err != nil {
			t.Fatal(err)
		}
		b.listen(mad.ServiceID(mad.PSUDP, 5000))
		time.Sleep(time.Minute)
		synctest.Wait()
		// One IPv6 REQ, built directly: tshark must show the IPv6 cma_hdr.
		s6, d6 := netip.MustParseAddr("fd00:77::1"), netip.MustParseAddr("fd00:77::2")
		h6 := mad.CMAHdr{SrcPort: rdmaSrcPort, Src: s6, Dst: d6}
		r6 := &mad.REQ{LocalCommID: 77, ServiceID: sid, LocalQPN: 0x77, StartingPSN: 0x123456,
			ResponderResources: 4, InitiatorDepth: 2, PathMTU: mad.MTU1024, MaxCMRetries: 15,
			Primary:     mad.RoCEv2Path(mad.RoCEv2PathParams{Src: s6, Dst: d6}),
			PrivateData: append(h6.Append(nil), "user data"...)}
		n.mu.Lock()
		n.sent = append(n.sent, sentMAD{mad.AttrREQ, verbs.GIDFromAddr(s6), verbs.GIDFromAddr(d6), mad.AppendCM(nil, 77, r6)})
		n.mu.Unlock()
		sent = writeGSIPcap(t, n, path)
	})

	tsharktest.CheckNoMalformed(t, path)
	// One tshark run for every field; columns by name.
	cols := []string{
		"infiniband.bth.destqp", "infiniband.deth.q_key", "infiniband.deth.srcqp",
		"infiniband.mad.mgmtclass", "infiniband.mad.classversion", "infiniband.mad.method",
		"infiniband.mad.attributeid", "infiniband.mad.transactionid",
		"infiniband.cm.req.serviceid", "infiniband.cm.req.serviceid.dport", "infiniband.cm.req.localqpn",
		"infiniband.cm.req.startpsn", "infiniband.cm.req.responderres", "infiniband.cm.req.initdepth",
		"infiniband.cm.req.pppmtu", "infiniband.cm.req.maxcmretr", "infiniband.cm.req.prim_locallid",
		"infiniband.cm.req.prim_localgid_ipv4", "infiniband.cm.req.prim_remotegid_ipv4", "infiniband.cm.req.prim_hoplim",
		"infiniband.cm.req.ip_cm.ipv", "infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.sip4",
		"infiniband.cm.req.ip_cm.dip4", "infiniband.cm.req.ip_cm.private",
		"infiniband.cm.req.ip_cm.sip6", "infiniband.cm.req.ip_cm.dip6", "infiniband.cm.req.prim_localgid",
		"infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn", "infiniband.cm.rep.rnrretrcount",
		"infiniband.cm.rej.reason", "infiniband.cm.rej.msgrej", "infiniband.cm.req.remoteqpneecn",
	}
	rows := tsharktest.Fields(t, path, cols)
	if len(rows) != len(sent) {
		t.Fatalf("tshark saw %d frames, wrote %d", len(rows), len(sent))
	}
	col := func(r []string, name string) string {
		for i, c := range cols {
			if c == name {
				return strings.ToLower(r[i])
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	check := func(frame int, r []string, name, want string) {
		t.Helper()
		if got := col(r, name); got != want {
			t.Errorf("frame %d: %s = %q, want %q", frame, name, got, want)
		}
	}
	seen := map[mad.AttrID]bool{}
	for i, r := range rows {
		h := mad.Header(sent[i].b)
		seen[h.AttrID()] = true
		for name, want := range map[string]string{
			"infiniband.bth.destqp": "0x000001", "infiniband.deth.q_key": "0x0000000080010000",
			"infiniband.deth.srcqp": "0x00000001", "infiniband.mad.mgmtclass": "0x07",
			"infiniband.mad.classversion": "0x02", "infiniband.mad.method": "0x03",
			"infiniband.mad.attributeid":   fmt.Sprintf("0x%04x", uint16(h.AttrID())),
			"infiniband.mad.transactionid": fmt.Sprintf("0x%016x", h.TID()),
		} {
			check(i+1, r, name, want)
		}
		switch h.AttrID() {
		case mad.AttrREQ:
			var m mad.REQ
			if err := m.Decode(sent[i].b[mad.HeaderSize:]); err != nil {
				t.Fatal(err)
			}
			if m.LocalQPN == 0x77 {
				check(i+1, r, "infiniband.cm.req.ip_cm.ipv", "0x06")
				check(i+1, r, "infiniband.cm.req.ip_cm.sip6", "fd00:77::1")
				check(i+1, r, "infiniband.cm.req.ip_cm.dip6", "fd00:77::2")
				check(i+1, r, "infiniband.cm.req.prim_localgid", "fd00:77::1")
				continue
			}
			for name, want := range map[string]string{
				"infiniband.cm.req.serviceid":           "0x0000000001061c06",
				"infiniband.cm.req.serviceid.dport":     "0x1c06", // 7174
				"infiniband.cm.req.localqpn":            fmt.Sprintf("0x%06x", m.LocalQPN),
				"infiniband.cm.req.startpsn":            "0x123456",
				"infiniband.cm.req.responderres":        "0x04",
				"infiniband.cm.req.initdepth":           "0x02",
				"infiniband.cm.req.pppmtu":              "0x03",
				"infiniband.cm.req.maxcmretr":           "0x0f",
				"infiniband.cm.req.prim_locallid":       "65535", // permissive
				"infiniband.cm.req.prim_localgid_ipv4":  "10.201.0.1",
				"infiniband.cm.req.prim_remotegid_ipv4": "10.201.0.2",
				"infiniband.cm.req.prim_hoplim":         "0x40",
				"infiniband.cm.req.ip_cm.ipv":           "0x04",
				"infiniband.cm.req.ip_cm.sport":         fmt.Sprintf("0x%04x", rdmaSrcPort),
				"infiniband.cm.req.ip_cm.sip4":          "10.201.0.1",
				"infiniband.cm.req.ip_cm.dip4":          "10.201.0.2",
			} {
				check(i+1, r, name, want)
			}
			if p := strings.ReplaceAll(col(r, "infiniband.cm.req.ip_cm.private"), ":", ""); !strings.HasPrefix(p, fmt.Sprintf("%x", "user data")) {
				t.Errorf("frame %d: ip_cm.private = %q", i+1, p)
			}
		case mad.AttrREP:
			check(i+1, r, "infiniband.cm.rep.localqpn", "0x00002a")
			check(i+1, r, "infiniband.cm.rep.startpsn", "0x654321")
			check(i+1, r, "infiniband.cm.rep.rnrretrcount", "0x07")
		case mad.AttrREJ:
			check(i+1, r, "infiniband.cm.rej.reason", "0x001c") // consumer defined
			check(i+1, r, "infiniband.cm.rej.msgrej", "0x00")   // REQ
		case mad.AttrDREQ:
			check(i+1, r, "infiniband.cm.req.remoteqpneecn", "0x00002a")
		}
	}
	for _, a := range []mad.AttrID{mad.AttrREQ, mad.AttrMRA, mad.AttrREJ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ,
		mad.AttrDREP, mad.AttrLAP, mad.AttrAPR, mad.AttrSIDRREQ, mad.AttrSIDRREP} {
		if !seen[a] {
			t.Errorf("capture lacks %v", a)
		}
	}
}
