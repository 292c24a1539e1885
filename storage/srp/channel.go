package srp

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"softib/rdmacm"
	"softib/rdmarw"
	"softib/storage/scsi"
	"softib/verbs"
)

const (
	wrRecv   = 1 << 56
	wrSend   = 2 << 56
	wrRead   = 3 << 56
	wrIgnore = 4 << 56
	wrKind   = 0xff << 56

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
	t       *Target
	id      *rdmacm.ID
	pd      verbs.PD
	cq      verbs.CQ
	qp      verbs.QP
	worker  *verbs.CQWorker
	recvMR  verbs.MR
	sendMR  verbs.MR
	dataMR  verbs.MR
	itIU    int
	credits int

	sendFree chan int
	dataFree chan int
	tasks    sync.WaitGroup

	mu      sync.Mutex
	closing bool
	reads   map[int]chan verbs.WCStatus
}

// login answers a CONNECT_REQUEST carrying struct srp_login_req_rdma.
func (t *Target) login(ev *rdmacm.Event) {
	id := ev.ID
	reject := func(tag []byte, reason uint32, why string) {
		t.Stats.LoginRejects.Add(1)
		t.cfg.Logf("srp: rejecting login from %v: %s", id.RemoteAddr(), why)
		var b [LoginRejLen]byte
		id.Reject(PutLoginRej(b[:], tag, reason))
		id.Destroy()
	}
	req, err := ParseLoginReqRDMA(ev.Conn.PrivateData)
	if err != nil {
		reject(make([]byte, 8), RejUnableEstablish, err.Error())
		return
	}
	if req.BufFmt()&(BufFmtDirect|BufFmtIndirect) == 0 {
		reject(req.Tag(), RejUnsupportedDescFmt, fmt.Sprintf("buffer formats %#x", req.BufFmt()))
		return
	}
	itIU := int(req.ITIULen())
	if itIU > maxITIU {
		reject(req.Tag(), RejITIULenTooLarge, fmt.Sprintf("IU length %d > %d", itIU, maxITIU))
		return
	}
	if itIU < CmdLen {
		reject(req.Tag(), RejUnableEstablish, fmt.Sprintf("IU length %d", itIU))
		return
	}
	c, err := t.newChannel(id, itIU)
	if err != nil {
		reject(req.Tag(), RejInsufficientRes, err.Error())
		return
	}
	// Every channel stands on its own: a second login (multichannel)
	// keeps the first, so the response says "maintained" for it.
	var flags byte
	if req.Flags()&0x03 == 1 {
		flags = 0x02
	}
	var b [LoginRspLen]byte
	depth := ev.Conn.ResponderResources
	if depth == 0 {
		depth = 1
	}
	if err := id.Accept(&rdmacm.ConnParam{PrivateData: PutLoginRsp(b[:], req.Tag(), uint32(c.credits), uint32(itIU), maxTIIU, flags),
		ResponderResources: ev.Conn.InitiatorDepth, InitiatorDepth: depth, RNRRetryCount: 7}); err != nil {
		t.cfg.Logf("srp: accept %v: %v", id.RemoteAddr(), err)
		c.shutdown("accept failed")
		return
	}
	t.Stats.Logins.Add(1)
}

func (t *Target) newChannel(id *rdmacm.ID, itIU int) (c *channel, err error) {
	n := t.cfg.Credits
	c = &channel{t: t, id: id, itIU: itIU, credits: n, reads: map[int]chan verbs.WCStatus{},
		sendFree: make(chan int, n+8), dataFree: make(chan int, n)}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	dev := id.Device()
	c.pd = id.PD()
	sq := 2*(n*(maxDescs+1)+n+8) + 8
	if sq > dev.Query().MaxQPWR {
		sq = dev.Query().MaxQPWR
	}
	if c.cq, err = dev.CreateCQ(verbs.CQAttr{CQE: sq + n + 8, Channel: verbs.NewCompChannel(4)}); err != nil {
		return nil, err
	}
	if c.qp, err = id.CreateQP(c.pd, &verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: n + 8, MaxSendSGE: 2, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if c.recvMR, err = c.pd.RegMR(make([]byte, (n+8)*itIU), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.sendMR, err = c.pd.RegMR(make([]byte, (n+8)*maxTIIU), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.dataMR, err = c.pd.RegMR(scsi.AlignedBuf(n*slotLen), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range n + 8 {
		c.sendFree <- i
	}
	for i := range n {
		c.dataFree <- i
	}
	// A few receives beyond the credits hold IUs that need none
	// (SRP_I_LOGOUT, CRED_RSP, AER_RSP).
	for i := range n + 8 {
		if err := c.postRecv(i); err != nil {
			return nil, err
		}
	}
	if c.worker, err = verbs.StartCQWorker(c.cq, 0, c.completion); err != nil {
		return nil, err
	}
	id.SetContext(c)
	t.mu.Lock()
	t.chans[c] = struct{}{}
	t.mu.Unlock()
	return c, nil
}

func (c *channel) postRecv(slot int) error {
	_, err := c.qp.PostRecv([]verbs.RecvWR{{ID: wrRecv | uint64(slot), SGL: []verbs.SGE{c.recvMR.SGE(slot*c.itIU, c.itIU)}}})
	return err
}

func (c *channel) shutdown(why string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	// Added under c.mu: Target.Close's own shutdown call takes c.mu
	// after this, so the Add happens before its Wait.
	c.t.wg.Add(1)
	c.mu.Unlock()
	c.t.cfg.Logf("srp: channel from %v down: %s", c.id.RemoteAddr(), why)
	go func() {
		defer c.t.wg.Done()
		c.id.Disconnect()
		<-c.t.scsi.AbortNexus(c)
		if c.qp != nil {
			c.qp.Drain()
		}
		c.tasks.Wait()
		c.release()
	}()
}

func (c *channel) release() {
	if c.worker != nil {
		c.worker.Stop()
	}
	c.id.DestroyQP()
	for _, mr := range []verbs.MR{c.recvMR, c.sendMR, c.dataMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if c.cq != nil {
		c.cq.Destroy()
	}
	c.id.Destroy()
	c.t.mu.Lock()
	delete(c.t.chans, c)
	c.t.mu.Unlock()
}

func (c *channel) completion(wc *verbs.WC) {
	slot := int(wc.WRID &^ wrKind)
	switch wc.WRID & wrKind {
	case wrRecv:
		if wc.Status != verbs.WCSuccess {
			if wc.Status != verbs.WCWRFlushErr {
				c.shutdown(fmt.Sprintf("receive completion %v", wc.Status))
			}
			return
		}
		c.receive(c.recvMR.Buf()[slot*c.itIU : slot*c.itIU+int(wc.ByteLen)])
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		if !closing {
			if err := c.postRecv(slot); err != nil {
				c.shutdown(fmt.Sprintf("repost receive: %v", err))
			}
		}
	case wrSend:
		c.sendFree <- slot
		if wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
			c.shutdown(fmt.Sprintf("send completion %v", wc.Status))
		}
	case wrRead:
		c.mu.Lock()
		ch := c.reads[slot]
		delete(c.reads, slot)
		c.mu.Unlock()
		if ch != nil {
			ch <- wc.Status
		}
	case wrIgnore:
		if wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
			c.shutdown(fmt.Sprintf("RDMA WRITE completion %v", wc.Status))
		}
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
		slot, ok := slotFrom(c.dataFree)
		if !ok {
			// Only an initiator overrunning its request limit gets here.
			c.respond(tk.cmd.Tag, scsi.Result{Status: scsi.StatusTaskSetFull}, 0, 0, nil)
			return
		}
		tk.slot = slot
		st, ok := c.t.scsi.Begin(c, tk.lun, binary.BigEndian.Uint64(tk.cmd.Tag[:]))
		if !ok {
			c.dataFree <- tk.slot
			c.respond(tk.cmd.Tag, scsi.Result{Status: scsi.StatusCheckCondition,
				Sense: scsi.Sense{Key: scsi.KeyIllegalRequest, ASC: 0x4e}}, 0, 0, nil)
			return
		}
		tk.scsiTask = st
		c.tasks.Add(1)
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
		c.shutdown("SRP_I_LOGOUT")
	case OpCredRsp, OpAERRsp:
	default:
		c.t.Stats.BadIUs.Add(1)
		c.shutdown(fmt.Sprintf("IU opcode %#x", b[0]))
	}
}

func (c *channel) slotBuf(slot int) []byte {
	return c.dataMR.Buf()[slot*slotLen : slot*slotLen+maxXfer]
}

// rdmaRead fetches len(dst) bytes at remote d into local offset off of
// the data MR and waits for it.
func (c *channel) rdmaRead(rw *rdmarw.Ctx, slot, off int, d Desc) error {
	if _, err := rw.Init(c.qp, c.pd, []verbs.SGE{c.dataMR.SGE(off, int(d.Len))}, 0, d.VA, d.Key, rdmarw.Read); err != nil {
		return err
	}
	defer rw.Destroy()
	done := make(chan verbs.WCStatus, 1)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return errClosing
	}
	c.reads[slot] = done
	err := rw.Post(nil, wrRead|uint64(slot))
	if err != nil {
		delete(c.reads, slot)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if st := <-done; st != verbs.WCSuccess {
		return fmt.Errorf("RDMA READ completion %v", st)
	}
	return nil
}

var errClosing = fmt.Errorf("srp: channel closing")

func (c *channel) run(tk task) {
	defer c.tasks.Done()
	defer c.t.scsi.End(tk.scsiTask)
	defer func() { c.dataFree <- tk.slot }()
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
		descs, sum = ParseDescTable(c.dataMR.Buf()[base+maxXfer:base+maxXfer+int(ext.Len)], tk.cmd.ExtCount, nil)
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
			if _, err := x.Init(c.qp, c.pd, []verbs.SGE{c.dataMR.SGE(base+off, n)}, 0, d.VA, d.Key, rdmarw.Write); err != nil {
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
		c.shutdown(err.Error())
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
	slot := <-c.sendFree
	b := fill(c.sendMR.Buf()[slot*maxTIIU : (slot+1)*maxTIIU])
	wr := verbs.SendWR{ID: wrSend | uint64(slot), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.sendMR.SGE(slot*maxTIIU, len(b))}}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		c.sendFree <- slot
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
		_, err = c.qp.PostSend([]verbs.SendWR{wr})
	}
	if err != nil {
		c.sendFree <- slot
		go c.shutdown(fmt.Sprintf("post: %v", err))
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
	done := closedCh
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
	c.tasks.Add(1)
	go func() {
		defer c.tasks.Done()
		<-done
		resp := []byte{0, 0, 0, code}
		c.send(func(b []byte) []byte { return PutRsp(b, tag, 1, 0, 0, 0, 0, resp, nil) }, nil)
	}()
}

var closedCh = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()

// slotFrom takes a data buffer. An IU within the request limit can
// arrive just before the task whose SRP_RSP returned the credit lets go
// of its buffer (it posts the response first), so it waits a little;
// that task needs nothing from the CQ worker any more, so the wait cannot
// deadlock.
func slotFrom(free chan int) (int, bool) {
	select {
	case s := <-free:
		return s, true
	default:
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case s := <-free:
		return s, true
	case <-t.C:
		return 0, false
	}
}
