package iser

import (
	"encoding/binary"
	"fmt"

	"softib/rdmacm"
	"softib/rdmarw"
	"softib/storage/internal/rdmatarget"
	"softib/verbs"
)

const (
	recvSlot = HeadersLen + recvDSL
	sendSlot = HeadersLen + sendDSL
	noTag    = 0xffffffff
)

// conn is one iSER connection (one session: MaxConnections=1). Its
// embedded Conn's Mu also guards the fields below it.
type conn struct {
	rdmatarget.Conn
	t      *Target
	window int

	login    loginState
	full     bool
	expCmdSN uint32
	statSN   uint32
	inflight int
	// logoutSlot is the send slot of the logout response: its
	// completion ends the connection.
	logoutSlot int
}

// accept sets a connection up for a CONNECT_REQUEST and accepts it with
// the iSER CM private data, or rejects it.
func (t *Target) accept(ev *rdmacm.Event) {
	id := ev.ID
	pd := ev.Conn.PrivateData
	// Linux's ib_iser sends struct iser_cm_hdr (4 bytes): flags ZBVA not
	// supported (so STag VAs are real addresses) and maybe send with
	// invalidate not supported. A zero-based-VA initiator cannot be
	// served: rdmarw addresses the peer's memory by its VA.
	if len(pd) >= CMHdrLen && pd[0]&cmZBVANotSup == 0 {
		t.cfg.Logf("iser: rejecting %v: it asks for zero-based virtual addresses", id.RemoteAddr())
		id.Reject(nil)
		id.Destroy()
		return
	}
	c, err := t.newConn(id)
	if err != nil {
		t.cfg.Logf("iser: rejecting %v: %v", id.RemoteAddr(), err)
		id.Reject(nil)
		id.Destroy()
		return
	}
	depth := ev.Conn.ResponderResources
	if depth == 0 {
		depth = 1
	}
	// The accept's iser_cm_hdr: we use real addresses and never send
	// with invalidate (the initiator invalidates its own MRs).
	priv := []byte{cmZBVANotSup | cmSendWInvNoSup, 0, 0, 0}
	if err := id.Accept(&rdmacm.ConnParam{PrivateData: priv, ResponderResources: ev.Conn.InitiatorDepth,
		InitiatorDepth: depth, RNRRetryCount: 7}); err != nil {
		t.cfg.Logf("iser: accept %v: %v", id.RemoteAddr(), err)
		c.Shutdown("accept failed")
		return
	}
	t.Stats.Connections.Add(1)
}

func (t *Target) newConn(id *rdmacm.ID) (*conn, error) {
	w := t.cfg.Window
	c := &conn{t: t, window: w, logoutSlot: -1}
	c.login.p.rdma = true
	nSend := w + 16
	err := c.Setup(&t.l, rdmatarget.RDMACM(id), c, rdmatarget.Shape{
		Recv: w + 16, RecvLen: recvSlot,
		Send: nSend, SendLen: sendSlot,
		Data: w, DataLen: maxBurst,
		SendWR: func(dev verbs.Device) int {
			return 2*(w*rdmarw.MRFactor(dev, maxBurst/rdmarw.PageSize)+nSend) + 8
		},
	}, rdmatarget.Hooks{Receive: c.receive, Sent: c.sent})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// sent ends the connection when the logout response's (or failed
// login response's) send completed.
func (c *conn) sent(slot int) {
	c.Mu.Lock()
	logout := slot == c.logoutSlot
	c.Mu.Unlock()
	if logout {
		c.Shutdown("logout")
	}
}

// protoErr ends the connection after a protocol violation.
func (c *conn) protoErr(format string, args ...any) {
	c.t.Stats.ProtocolErrors.Add(1)
	c.Shutdown(fmt.Sprintf(format, args...))
}

// receive handles one received message. It runs on the CQ worker; the
// receive buffer is reposted when it returns, so anything kept is copied.
func (c *conn) receive(b []byte) {
	m, err := ParseMessage(b)
	if err != nil {
		c.protoErr("%v", err)
		return
	}
	c.Mu.Lock()
	full := c.full
	c.Mu.Unlock()
	if !full {
		if m.BHS.Opcode() != OpLoginReq {
			c.protoErr("opcode %#x before login", m.BHS.Opcode())
			return
		}
		c.doLogin(m)
		return
	}
	op := m.BHS.Opcode()
	if !m.BHS.Immediate() && op != OpDataOut {
		c.Mu.Lock()
		// RC delivers in order and the window bounds the initiator, so
		// a non-immediate command's CmdSN is the expected one; anything
		// else is a broken initiator.
		if sn := m.BHS.CmdSN(); sn != c.expCmdSN {
			c.Mu.Unlock()
			c.protoErr("CmdSN %d, expected %d", sn, c.expCmdSN)
			return
		}
		c.expCmdSN++
		c.Mu.Unlock()
	}
	switch op {
	case OpSCSICmd:
		c.scsiCommand(m)
	case OpNOPOut:
		c.t.Stats.NOPs.Add(1)
		if m.BHS.ITT() == noTag {
			return // a NOP-In's answer, or a ping that wants none
		}
		c.send(func(h BHS) []byte {
			h[0], h[1] = OpNOPIn, flagFinal
			copy(h[8:16], m.BHS[8:16])
			h.PutU32(16, m.BHS.ITT())
			h.PutU32(20, noTag)
			return m.Data[:min(len(m.Data), c.login.p.maxSendDSL)]
		}, false)
	case OpTMFReq:
		c.tmf(m)
	case OpLogoutReq:
		c.t.Stats.Logouts.Add(1)
		c.send(func(h BHS) []byte {
			h[0], h[1] = OpLogoutRsp, flagFinal
			h.PutU32(16, m.BHS.ITT())
			binary.BigEndian.PutUint16(h[40:], 2) // Time2Wait
			binary.BigEndian.PutUint16(h[42:], 20)
			return nil
		}, true)
	case OpTextReq:
		// No text keys are negotiable in full feature phase here; an
		// empty final answer ends the exchange (SendTargets in a normal
		// session answers this target).
		kvs, _ := ParseText(m.Data)
		var data []byte
		for _, kv := range kvs {
			if kv.Key == "SendTargets" {
				data, _ = sendTargets(kv.Value, c.t)
			}
		}
		c.send(func(h BHS) []byte {
			h[0], h[1] = OpTextRsp, flagFinal
			h.PutU32(16, m.BHS.ITT())
			h.PutU32(20, noTag)
			return data[:min(len(data), c.login.p.maxSendDSL)]
		}, false)
	default:
		// Data-Out cannot come (InitialR2T=Yes, immediate data only):
		// protocol error; anything else is not supported.
		reason := byte(0x05)
		if op == OpDataOut {
			reason = 0x04
		}
		c.reject(m.BHS, reason)
	}
}

func (c *conn) reject(bhs BHS, reason byte) {
	c.t.Stats.Rejects.Add(1)
	hdr := append([]byte(nil), bhs...)
	c.send(func(h BHS) []byte {
		h[0], h[1], h[2] = OpReject, flagFinal, reason
		h.PutU32(16, noTag)
		return hdr
	}, false)
}

// send builds a target PDU in a free send slot with fill (which writes
// the opcode-specific fields and returns the data segment; it must not
// keep h) and posts it, numbering it with StatSN/ExpCmdSN/MaxCmdSN.
// logout marks the PDU whose completion ends the connection.
func (c *conn) send(fill func(h BHS) []byte, logout bool) {
	c.postPDU(fill, nil, logout, false)
}

// postPDU is send with the RDMA WRITEs of a data-in context chained in
// front; done tells that the PDU ends a command (StatSN counts responses
// and the command leaves the window).
func (c *conn) postPDU(fill func(h BHS) []byte, rw *rdmarw.Ctx, logout, done bool) error {
	slot := <-c.SendFree
	b := c.SendBuf(slot)
	Hdr(b).PutCtrl(0, 0, 0, 0)
	h := BHS(b[HdrLen:HeadersLen])
	clear(h)
	data := fill(h)
	n := copy(b[HeadersLen:], data)
	h.SetDataLen(n)
	wr := c.SendWR(slot, HeadersLen+n)
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if c.Closing {
		c.SendFree <- slot
		return errClosing
	}
	if done {
		c.inflight--
	}
	h.PutU32(24, c.statSN)
	c.statSN++
	h.PutU32(28, c.expCmdSN)
	h.PutU32(32, c.expCmdSN+uint32(c.window-c.inflight)-1)
	if logout {
		c.logoutSlot = slot
	}
	var err error
	if rw != nil {
		err = rw.Post([]verbs.SendWR{wr}, 0)
	} else {
		_, err = c.QP.PostSend([]verbs.SendWR{wr})
	}
	if err != nil {
		c.SendFree <- slot
	}
	return err
}

var errClosing = rdmatarget.ErrClosing

// doLogin answers one login request.
func (c *conn) doLogin(m Message) {
	r := c.login.login(m.BHS, m.Data, c.t)
	ls := &c.login
	if r.status != statusSuccess {
		c.t.Stats.LoginFailures.Add(1)
	}
	slot := <-c.SendFree
	b := c.SendBuf(slot)
	Hdr(b).PutCtrl(0, 0, 0, 0)
	h := BHS(b[HdrLen:HeadersLen])
	clear(h)
	h[0] = OpLoginRsp
	if r.transit {
		h[1] = flagFinal
	}
	h[1] |= byte(r.csg)<<2 | byte(r.nsg)
	copy(h[8:14], ls.isid[:])
	binary.BigEndian.PutUint16(h[14:16], ls.tsih)
	h.PutU32(16, m.BHS.ITT())
	h[36], h[37] = byte(r.status>>8), byte(r.status)
	n := copy(b[HeadersLen:], r.text)
	h.SetDataLen(n)
	c.Mu.Lock()
	if r.status == statusSuccess {
		if m.BHS.ExpStatSN() != 0 && c.statSN == 0 {
			c.statSN = m.BHS.ExpStatSN()
		}
		h.PutU32(24, c.statSN)
		c.statSN++
	}
	c.expCmdSN = ls.cmdSN
	h.PutU32(28, c.expCmdSN)
	h.PutU32(32, c.expCmdSN+uint32(c.window)-1)
	if r.done && r.status == statusSuccess {
		c.full = true
		if ls.p.discovery {
			// Discovery runs over TCP; an RDMA discovery session is
			// answered but has nothing to do.
			c.t.Stats.Discoveries.Add(1)
		}
		c.t.Stats.Logins.Add(1)
		c.t.cfg.Logf("iser: %s logged in to %s (immediate data %v, first burst %d)",
			ls.p.initiatorName, ls.p.targetName, ls.p.immediateData, ls.p.firstBurst)
	}
	if r.status != statusSuccess {
		c.logoutSlot = slot // the connection ends after the failure response
	}
	c.Mu.Unlock()
	if _, err := c.QP.PostSend([]verbs.SendWR{c.SendWR(slot, HeadersLen+n)}); err != nil {
		c.SendFree <- slot
		c.Shutdown(fmt.Sprintf("post login response: %v", err))
	}
}
