package o2iblnd

import (
	"testing"

	"softib/wire/lnetwire"
)

// FuzzConnReq feeds arbitrary CONNREQ private data through the passive
// side's checks: no panic, and anything accepted is a CONNREQ for this
// NI with parameters within ours.
func FuzzConnReq(f *testing.F) {
	me := lnetwire.MustParseNID("192.168.77.1@o2ib")
	d := &Driver{nid: me, incarnation: 42, cfg: Config{}.withDefaults(8)}
	req := func(mod func(*lnetwire.KibMsgFields)) []byte {
		m := lnetwire.KibMsgFields{
			KibMsgHdr: lnetwire.KibMsgHdr{Version: lnetwire.KibVersion2, Type: lnetwire.KibCONNREQ,
				SrcNID: lnetwire.MustParseNID("192.168.77.2@o2ib"), SrcStamp: 7, DstNID: me},
			ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096},
		}
		if mod != nil {
			mod(&m)
		}
		return m.Append(nil)
	}
	f.Add(req(nil))
	f.Add(req(func(m *lnetwire.KibMsgFields) { m.Version = lnetwire.KibVersion1 }))
	f.Add(req(func(m *lnetwire.KibMsgFields) { m.DstStamp = 42 }))
	f.Add(req(func(m *lnetwire.KibMsgFields) { m.DstStamp = 41 }))
	f.Add(req(func(m *lnetwire.KibMsgFields) { m.ConnParams.QueueDepth = 9 }))
	f.Add(req(func(m *lnetwire.KibMsgFields) { m.ConnParams.MaxFrags = 300 }))
	f.Add(req(func(m *lnetwire.KibMsgFields) { m.Type = lnetwire.KibCONNACK }))
	sw := req(nil)
	lnetwire.SwapKibMsg(sw)
	f.Add(sw)
	f.Add(append(req(nil), make([]byte, 40)...)) // padded like a REQ's private data field
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, pd []byte) {
		m, why, ok := d.vetConnReq(pd, DefaultService)
		if !ok {
			if why < lnetwire.KibRejConnRace || why > lnetwire.KibRejEarly {
				t.Fatalf("reject reason %d", why)
			}
			return
		}
		cp := m.ConnParams()
		if m.Type() != lnetwire.KibCONNREQ || m.DstNID() != me || (m.DstStamp() != 0 && m.DstStamp() != 42) ||
			cp.QueueDepth == 0 || int(cp.QueueDepth) > d.cfg.PeerCredits || cp.MaxFrags == 0 ||
			int(cp.MaxFrags) > lnetwire.KibMaxRDMAFrags || cp.MaxMsgSize > lnetwire.KibMsgSize {
			t.Fatalf("accepted %+v %+v", m.Hdr(), cp)
		}
		if _, _, ok := d.vetConnReq(pd, DefaultService+1); ok {
			t.Fatal("accepted on another port")
		}
	})
}
