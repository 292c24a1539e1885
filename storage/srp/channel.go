package srp

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"softib/rdmacm"
	"softib/rdmarw"
	"softib/storage/internal/rdmatarget"
	"softib/storage/scsi"
	"softib/verbs"
)

const (
	// wrIgnore marks the RDMA WRITEs of data-in chained in front of
	// the SRP_RSP: only their errors matter.
	wrIgnore = rdmatarget.WRUser

	// maxITIU is the largest SRP_CMD the target takes (ib_srp's
	// default with 255 indirect descriptors in the IU fits).
	maxITIU = 64 << 10
	// maxTIIU is the largest IU the target sends: an SRP_RSP with fixed
	// sense data or TMF response data.
	maxTIIU = 256
	// maxXfer is the largest data transfer of one command.
	maxXfer = 512 << 10
	// maxDescs bounds an external descriptor table.
	maxDescs = 256
	slotLen  = maxXfer + maxDescs*DescLen
)

// channel is one SRP RDMA channel.
type channel struct {
	rdmatarget.Conn
	t       *Target
	itIU    int
	credits int
}

// loginPort is what a login needs from its connection manager: the
// endpoint the channel is set up on, and the reply carrying the
// SRP_LOGIN_RSP or SRP_LOGIN_REJ.
type loginPort interface {
	endpoint() rdmatarget.Endpoint
	// accept sends the REP with rsp; reject sends the REJ with rej and
	// releases the request.
	accept(rsp []byte) error
	reject(rej []byte)
	peer() string
}

// rdmacmLogin is a CONNECT_REQUEST carrying struct srp_login_req_rdma.
type rdmacmLogin struct{ ev *rdmacm.Event }

func (l rdmacmLogin) endpoint() rdmatarget.Endpoint { return rdmatarget.RDMACM(l.ev.ID) }
func (l rdmacmLogin) peer() string                  { return l.ev.ID.RemoteAddr().String() }
func (l rdmacmLogin) reject(rej []byte) {
	l.ev.ID.Reject(rej)
	l.ev.ID.Destroy()
}
func (l rdmacmLogin) accept(rsp []byte) error {
	depth := l.ev.Conn.ResponderResources
	if depth == 0 {
		depth = 1
	}
	return l.ev.ID.Accept(&rdmacm.ConnParam{PrivateData: rsp,
		ResponderResources: l.ev.Conn.InitiatorDepth, InitiatorDepth: depth, RNRRetryCount: 7})
}

// ibcmLogin is an IB CM REQ carrying SRP_LOGIN_REQ.
type ibcmLogin struct{ c *rdmatarget.IBCMConn }

func (l ibcmLogin) endpoint() rdmatarget.Endpoint { return l.c }
func (l ibcmLogin) peer() string                  { return l.c.Peer() }
func (l ibcmLogin) reject(rej []byte)             { l.c.Reject(rej) }
func (l ibcmLogin) accept(rsp []byte) error {
	// ib_srpt's REP: 4 RDMA READs each way, flow control, RNR retry 7.
	return l.c.Accept(rdmatarget.REPParam{PrivateData: rsp, ResponderResources: 4, InitiatorDepth: 4, FlowControl: true})
}

// loginRDMACM answers a CONNECT_REQUEST (Linux ib_srp with dest=).
func (t *Target) loginRDMACM(ev *rdmacm.Event) {
	req, err := ParseLoginReqRDMA(ev.Conn.PrivateData)
	if err != nil {
		t.refuse(rdmacmLogin{ev}, make([]byte, 8), RejUnableEstablish, err.Error())
		return
	}
	t.login(rdmacmLogin{ev}, req.fields())
}

// loginIBCM answers an IB CM REQ to the target's service ID.
func (t *Target) loginIBCM(c *rdmatarget.IBCMConn, pd []byte) {
	req, err := ParseLoginReq(pd)
	if err != nil {
		t.refuse(ibcmLogin{c}, make([]byte, 8), RejUnableEstablish, err.Error())
		return
	}
	t.login(ibcmLogin{c}, req.fields())
}

func (t *Target) refuse(p loginPort, tag []byte, reason uint32, why string) {
	t.Stats.LoginRejects.Add(1)
	t.cfg.Logf("srp: rejecting login from %v: %s", p.peer(), why)
	var b [LoginRejLen]byte
	p.reject(PutLoginRej(b[:], tag, reason))
}

// login checks a login request, sets its channel up and accepts it:
// the same for both connection managers.
func (t *Target) login(p loginPort, req loginFields) {
	if req.bufFmt&(BufFmtDirect|BufFmtIndirect) == 0 {
		t.refuse(p, req.tag, RejUnsupportedDescFmt, fmt.Sprintf("buffer formats %#x", req.bufFmt))
		return
	}
	itIU := int(req.itIU)
	if itIU > maxITIU {
		t.refuse(p, req.tag, RejITIULenTooLarge, fmt.Sprintf("IU length %d > %d", itIU, maxITIU))
		return
	}
	if itIU < CmdLen {
		t.refuse(p, req.tag, RejUnableEstablish, fmt.Sprintf("IU length %d", itIU))
		return
	}
	// Like ib_srpt, the login names the target port: id_ext, ioc_guid.
	if tp := t.TargetPortID(); !bytes.Equal(req.tPort, tp[:]) {
		t.refuse(p, req.tag, RejUnableAssociate, fmt.Sprintf("target port ID %x, ours is %x", req.tPort, tp))
		return
	}
	c, err := t.newChannel(p.endpoint(), itIU)
	if err != nil {
		t.refuse(p, req.tag, RejInsufficientRes, err.Error())
		return
	}
	// Every channel stands on its own: a second login (multichannel)
	// keeps the first, so the response says "maintained" for it.
	var flags byte
	if req.flags&0x03 == 1 {
		flags = 0x02
	}
	var b [LoginRspLen]byte
	if err := p.accept(PutLoginRsp(b[:], req.tag, uint32(c.credits), uint32(itIU), maxTIIU, flags)); err != nil {
		t.cfg.Logf("srp: accept %v: %v", p.peer(), err)
		c.Shutdown("accept failed")
		return
	}
	t.Stats.Logins.Add(1)
}

func (t *Target) newChannel(ep rdmatarget.Endpoint, itIU int) (*channel, error) {
	n := t.cfg.Credits
	c := &channel{t: t, itIU: itIU, credits: n}
	// A few receives beyond the credits hold IUs that need none
	// (SRP_I_LOGOUT, CRED_RSP, AER_RSP).
	err := c.Setup(&t.l, ep, c, rdmatarget.Shape{
		Recv: n + 8, RecvLen: itIU,
		Send: n + 8, SendLen: maxTIIU,
		Data: n, DataLen: slotLen,
		SendWR: func(dev verbs.Device) int {
			return min(2*(n*(maxDescs+1)+n+8)+8, dev.Query().MaxQPWR)
		},
	}, rdmatarget.Hooks{Receive: c.receive, Other: c.writeDone})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// writeDone takes the completions of data-in WRITEs that are not the
// last of their chain (they are signaled only when they fail).
func (c *channel) writeDone(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
		c.Shutdown(fmt.Sprintf("RDMA WRITE completion %v", wc.Status))
	}
}

// task is one SRP_CMD in flight.
type task struct {
	cmd      Cmd
	cdb      [16]byte
	lun      uint64
	badLUN   bool
	slot     int
	scsiTask *scsi.Task
}

func (c *channel) receive(b []byte) {
	if len(b) == 0 {
		c.t.Stats.BadIUs.Add(1)
		return
	}
	switch b[0] {
	case OpCmd:
		c.t.Stats.Commands.Add(1)
		var tk task
		if err := ParseCmd(b, &tk.cmd); err != nil {
			c.t.Stats.BadIUs.Add(1)
			var tag [8]byte
			if len(b) >= 16 {
				copy(tag[:], b[8:16])
			}
			c.respond(tag, scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseInvalidFieldCDB}, 0, 0, nil)
			return
		}
		tk.cmd.CDB = nil // points into the receive buffer
		copy(tk.cdb[:], b[32:48])
		tk.cmd.Descs = append([]Desc(nil), tk.cmd.Descs...)
		lun, ok := scsi.DecodeLUN(tk.cmd.LUN)
		tk.lun, tk.badLUN = lun, !ok
		if tk.cmd.Length > maxXfer || len(tk.cmd.Descs) > maxDescs || tk.cmd.ExtCount > maxDescs {
			c.respond(tk.cmd.Tag, scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseInvalidFieldCDB}, 0, 0, nil)
			return
		}
		slot, ok := rdmatarget.SlotFrom(c.DataFree)
		if !ok {
			// Only an initiator overrunning its request limit gets here.
			c.respond(tk.cmd.Tag, scsi.Result{Status: scsi.StatusTaskSetFull}, 0, 0, nil)
			return
		}
		tk.slot = slot
		st, ok := c.t.scsi.Begin(c, tk.lun, binary.BigEndian.Uint64(tk.cmd.Tag[:]))
		if !ok {
			c.DataFree <- tk.slot
			c.respond(tk.cmd.Tag, scsi.Result{Status: scsi.StatusCheckCondition,
				Sense: scsi.Sense{Key: scsi.KeyIllegalRequest, ASC: 0x4e}}, 0, 0, nil)
			return
		}
		tk.scsiTask = st
		c.Tasks.Add(1)
		go c.run(tk)
	case OpTskMgmt:
		c.t.Stats.TMFs.Add(1)
		tm, err := ParseTskMgmt(b)
		if err != nil {
			c.t.Stats.BadIUs.Add(1)
			return
		}
		c.tmf(tm)
	case OpILogout:
		c.t.Stats.Logouts.Add(1)
		c.Shutdown("SRP_I_LOGOUT")
	case OpCredRsp, OpAERRsp:
	default:
		c.t.Stats.BadIUs.Add(1)
		c.Shutdown(fmt.Sprintf("IU opcode %#x", b[0]))
	}
}

func (c *channel) slotBuf(slot int) []byte {
	return c.DataMR.Buf()[slot*slotLen : slot*slotLen+maxXfer]
}

// rdmaRead fetches remote d into local offset off of the data MR and
// waits for it.
func (c *channel) rdmaRead(rw *rdmarw.Ctx, slot, off int, d Desc) error {
	err := c.Read(rw, slot, c.DataMR.SGE(off, int(d.Len)), d.VA, d.Key)
	if err != nil && err != errClosing {
		return fmt.Errorf("RDMA READ %w", err)
	}
	return err
}

var errClosing = rdmatarget.ErrClosing

func (c *channel) run(tk task) {
	defer c.Tasks.Done()
	defer c.t.scsi.End(tk.scsiTask)
	defer func() { c.DataFree <- tk.slot }()
	var rw rdmarw.Ctx
	base := tk.slot * slotLen
	descs := tk.cmd.Descs
	if tk.cmd.External != nil {
		// Fetch the descriptor table from the initiator's memory first.
		ext := *tk.cmd.External
		if err := c.rdmaRead(&rw, tk.slot, base+maxXfer, ext); err != nil {
			c.failed(tk, err)
			return
		}
		var sum uint64
		descs, sum = ParseDescTable(c.DataMR.Buf()[base+maxXfer:base+maxXfer+int(ext.Len)], tk.cmd.ExtCount, nil)
		if sum != tk.cmd.Length || sum > maxXfer {
			c.respond(tk.cmd.Tag, scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseInvalidFieldCDB}, 0, 0, nil)
			return
		}
	}
	length := int(tk.cmd.Length)
	buf := c.slotBuf(tk.slot)[:length]
	if tk.cmd.Out {
		off := base
		for _, d := range descs {
			if d.Len == 0 {
				continue
			}
			if err := c.rdmaRead(&rw, tk.slot, off, d); err != nil {
				c.failed(tk, err)
				return
			}
			off += int(d.Len)
		}
	}
	var res scsi.Result
	if tk.badLUN {
		res = scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseLUNNotSupported}
	} else {
		res = c.t.scsi.Execute(tk.lun, tk.cdb[:], buf)
	}
	if tk.scsiTask.Aborted() {
		return
	}
	var flags byte
	var diRes uint32
	if !tk.cmd.Out && res.DataIn < length {
		flags |= RspFlagDIUnder
		diRes = uint32(length - res.DataIn)
	}
	// Data-in: one RDMA WRITE context per descriptor, the SRP_RSP
	// chained behind the last.
	var ctxs []*rdmarw.Ctx
	if !tk.cmd.Out && res.DataIn > 0 {
		off, left := 0, res.DataIn
		for _, d := range descs {
			if left == 0 {
				break
			}
			n := min(int(d.Len), left)
			if n == 0 {
				continue
			}
			x := new(rdmarw.Ctx)
			if _, err := x.Init(c.QP, c.PD, []verbs.SGE{c.DataMR.SGE(base+off, n)}, 0, d.VA, d.Key, rdmarw.Write); err != nil {
				c.failed(tk, err)
				return
			}
			ctxs = append(ctxs, x)
			off += n
			left -= n
		}
	}
	c.respond(tk.cmd.Tag, res, flags, diRes, ctxs)
	for _, x := range ctxs {
		x.Destroy()
	}
}

func (c *channel) failed(tk task, err error) {
	if !tk.scsiTask.Aborted() && err != errClosing {
		c.Shutdown(err.Error())
	}
}

// respond sends an SRP_RSP returning one credit, after the data-in
// contexts' WRITEs.
func (c *channel) respond(tag [8]byte, res scsi.Result, flags byte, diRes uint32, in []*rdmarw.Ctx) {
	var sense []byte
	var sb [scsi.FixedSenseLen]byte
	if res.Status == scsi.StatusCheckCondition {
		sense = res.Sense.PutFixed(sb[:])
	}
	c.send(func(b []byte) []byte { return PutRsp(b, tag, 1, flags, byte(res.Status), 0, diRes, nil, sense) }, in)
}

func (c *channel) send(fill func(b []byte) []byte, in []*rdmarw.Ctx) {
	slot := <-c.SendFree
	b := fill(c.SendBuf(slot))
	wr := c.SendWR(slot, len(b))
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if c.Closing {
		c.SendFree <- slot
		return
	}
	var err error
	for i, x := range in {
		if i < len(in)-1 {
			err = x.Post(nil, wrIgnore)
		} else {
			err = x.Post([]verbs.SendWR{wr}, 0)
		}
		if err != nil {
			break
		}
	}
	if len(in) == 0 {
		_, err = c.QP.PostSend([]verbs.SendWR{wr})
	}
	if err != nil {
		c.SendFree <- slot
		go c.Shutdown(fmt.Sprintf("post: %v", err))
	}
}

// TMF response codes (SRP-2 Table 24, in byte 3 of the response data).
const (
	tmfComplete     = 0x00
	tmfNotSupported = 0x04
	tmfFailed       = 0x05
)

func (c *channel) tmf(tm TskMgmt) {
	tag := tm.Tag()
	lun, ok := scsi.DecodeLUN(tm.LUN())
	code := byte(tmfComplete)
	done := rdmatarget.Closed
	switch fn := tm.Func(); {
	case !ok:
		code = tmfFailed
	case fn == TskAbortTask:
		tt := tm.TaskTag()
		// A task that already finished is "complete" for SRP: the
		// initiator already has (or will get) its response.
		_, done = c.t.scsi.AbortTask(c, lun, binary.BigEndian.Uint64(tt[:]))
	case fn == TskAbortTaskSet, fn == TskClearTaskSet:
		done = c.t.scsi.AbortNexus(c)
	case fn == TskLUNReset:
		r, d := c.t.scsi.ResetLUN(lun)
		if r != scsi.TMFComplete {
			code = tmfFailed
		}
		done = d
	default:
		code = tmfNotSupported
	}
	c.Tasks.Add(1)
	go func() {
		defer c.Tasks.Done()
		<-done
		resp := []byte{0, 0, 0, code}
		c.send(func(b []byte) []byte { return PutRsp(b, tag, 1, 0, 0, 0, 0, resp, nil) }, nil)
	}()
}
