package cm_test

import (
	"net/netip"
	"testing"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

type nullPort struct{ gid verbs.GID }

func (p nullPort) Send([]byte, cm.Addr) error { return nil }
func (p nullPort) LocalGID() verbs.GID        { return p.gid }

// FuzzHandleMAD feeds sequences of arbitrary MADs (the input is cut into
// 256-byte pieces) to a CM with a listener that accepts everything. It
// must never panic; bad MADs are counted. Seeds are encodings of every
// CM message type addressed to the connection the seed REQ creates.
func FuzzHandleMAD(f *testing.F) {
	const first = 1000
	path := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")})
	msgs := []mad.Message{
		&mad.REQ{LocalCommID: 7, ServiceID: testSID, LocalQPN: 0x100, StartingPSN: 1, Primary: path,
			MaxCMRetries: 15, RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20},
		&mad.MRA{LocalCommID: 7, RemoteCommID: first + 1, MessageMRAed: mad.MsgREP, ServiceTimeout: 20},
		&mad.REJ{LocalCommID: 7, RemoteCommID: first + 1, Reason: mad.RejStaleConn},
		&mad.REP{LocalCommID: 7, RemoteCommID: first + 1, LocalQPN: 0x100},
		&mad.RTU{LocalCommID: 7, RemoteCommID: first + 1},
		&mad.DREQ{LocalCommID: 7, RemoteCommID: first + 1, RemoteQPN: 0x200},
		&mad.DREP{LocalCommID: 7, RemoteCommID: first + 1},
		&mad.LAP{LocalCommID: 7, RemoteCommID: first + 1, Alternate: path},
		&mad.APR{LocalCommID: 7, RemoteCommID: first + 1},
		&mad.SIDRREQ{RequestID: 9, ServiceID: testSID},
		&mad.SIDRREP{RequestID: first + 1},
	}
	var all []byte
	for i, m := range msgs {
		b := mad.AppendCM(nil, uint64(i), m)
		f.Add(b)
		all = append(all, b...)
	}
	f.Add(all)
	f.Add(append(mad.AppendCM(nil, 1, msgs[0]), mad.AppendCM(nil, 2, msgs[4])...))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 8*mad.MADSize {
			return
		}
		c := cm.New(nullPort{verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.2"))}, cm.Config{FirstCommID: first})
		defer c.Close()
		l, err := c.CreateID(func(id *cm.ID, ev *cm.Event) error {
			switch ev.Type {
			case cm.EventREQReceived:
				return id.SendREP(&cm.REPParam{QPN: 0x200})
			case cm.EventDREQReceived:
				return id.SendDREP(nil)
			case cm.EventLAPReceived:
				return id.SendAPR(mad.APRSuccess, nil, nil)
			case cm.EventSIDRREQReceived:
				return id.SendSIDRREP(&cm.SIDRREPParam{QPN: 1})
			}
			return nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Listen(testSID, 0); err != nil {
			t.Fatal(err)
		}
		from := cm.Addr{QPN: 1}
		from.AH.GRH.DGID = verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1"))
		for len(in) > 0 {
			n := min(len(in), mad.MADSize)
			c.HandleMAD(in[:n], from)
			in = in[n:]
		}
	})
}

// FuzzParseGRHArea checks the GRH-area parser on arbitrary bytes.
func FuzzParseGRHArea(f *testing.F) {
	v4 := make([]byte, 40)
	v4[20] = 0x45
	v6 := make([]byte, 40)
	v6[0] = 0x60
	f.Add(v4)
	f.Add(v6)
	f.Fuzz(func(t *testing.T, b []byte) {
		src, dst, _, ok := cm.ParseGRHArea(b)
		if ok && (!src.IsValid() || !dst.IsValid() || len(b) < 40) {
			t.Fatalf("ok with %v %v from %d bytes", src, dst, len(b))
		}
	})
}
