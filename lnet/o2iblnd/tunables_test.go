package o2iblnd_test

import (
	"bytes"
	"strings"
	"testing"

	"softib/internal/pcap"
	"softib/internal/testenv"
	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/lnetwire"
	"softib/wire/roce"
)

// TestTunablesRefused: an NI whose wrq_sge exceeds its device's max_sge,
// or whose ib_mtu is not an IB MTU or not the device's active MTU (the
// path MTU softib's RDMA CM gives every connection), does not start, and
// the error names the tunable; ib_mtu equal to the active MTU does.
func TestTunablesRefused(t *testing.T) {
	dev, m, a := newDevice(t)
	pa, err := dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	act := pa.ActiveMTU.Bytes()
	other := 1024
	if act == 1024 {
		other = 2048
	}
	b := a.As4()
	nid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
	start := func(cfg o2iblnd.Config) error {
		cfg.CM = m
		in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{o2iblnd.New(cfg)},
			Nets: []lnet.NetConfig{{Net: nid.Net(), Addr: nid.Addr()}}, Log: testLog})
		if err == nil {
			in.Close()
		}
		return err
	}
	for _, c := range []struct {
		cfg  o2iblnd.Config
		want string // "" starts
	}{
		{o2iblnd.Config{WrqSGE: dev.Query().MaxSGE + 1}, "wrq_sge"},
		{o2iblnd.Config{WrqSGE: dev.Query().MaxSGE}, ""},
		{o2iblnd.Config{IBMTU: 1000}, "ib_mtu 1000"},
		{o2iblnd.Config{IBMTU: other}, "active MTU"},
		{o2iblnd.Config{IBMTU: act}, ""},
	} {
		err := start(c.cfg)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestTOSAndNoMRCache moves PUTs and GETs over connections opened with
// tos 0x60 and fmr_cache off: the RoCE packets both sides send carry TOS
// 0x60 (the active side's CM ID's; the passive side's QP takes it from
// the REQ), and no LNet buffer registration outlives its transfer.
func TestTOSAndNoMRCache(t *testing.T) {
	var caps [2]testenv.Buffer
	var nodes [2]*node
	for i := range nodes {
		a := testAddr()
		dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a, Capture: &caps[i]}})
		if err != nil {
			t.Fatal(err)
		}
		m := rdmacm.NewManager(rdmacm.Config{})
		t.Cleanup(func() { dev.Close() })
		t.Cleanup(func() { m.Close() })
		if err := m.AddDevice(dev); err != nil {
			t.Fatal(err)
		}
		nodes[i] = newNodeOn(t, dev, m, a, o2iblnd.Config{TOS: 0x60, NoMRCache: true})
	}
	for i, size := range []int{1000, 65537, 1 << 20} {
		putGet(t, nodes[0], nodes[1], size, uint64(300+i), 1)
	}
	for i, x := range nodes {
		if n, bytes := x.drv().MRCache(); n != 0 || bytes != 0 {
			t.Errorf("node %d: %d registrations (%d bytes) cached with fmr_cache off", i, n, bytes)
		}
	}
	nodes[0].in.Close()
	nodes[1].in.Close()
	for i, x := range nodes {
		x.dev.Close()
		recs, err := readPcap(caps[i].Bytes())
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		for _, r := range recs {
			f, err := roce.ParseFrame(r.Data)
			if err != nil || f.Src.Addr() != x.dev.(*rxe.Device).Addr().Addr() {
				continue
			}
			if f.Packet.BTH().Opcode()&0xE0 != roce.TransportRC {
				continue // QP1 (UD): the CM's MADs have their own class
			}
			sent++
			if f.IP[1] != 0x60 {
				t.Errorf("node %d: %v sent with TOS %#x, want 0x60", i, f.Packet.BTH().Opcode(), f.IP[1])
				break
			}
		}
		if sent == 0 {
			t.Errorf("node %d: no RC packets captured", i)
		}
	}
}

// readPcap parses a capture in memory (each record's own copy: a
// Reader's records share its buffer).
func readPcap(b []byte) ([]pcap.Record, error) {
	r, err := pcap.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var out []pcap.Record
	for {
		rec, err := r.Next()
		if err != nil {
			return out, nil
		}
		rec.Data = bytes.Clone(rec.Data)
		out = append(out, rec)
	}
}
