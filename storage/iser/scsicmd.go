package iser

import (
	"encoding/binary"
	"fmt"

	"softib/rdmarw"
	"softib/storage/internal/rdmatarget"
	"softib/storage/scsi"
	"softib/verbs"
)

// task is one SCSI command in flight.
type task struct {
	itt      uint32
	lun      uint64
	cdb      [16]byte
	edtl     int
	read     bool
	write    bool
	imm      int
	wstag    uint32
	wva      uint64
	rstag    uint32
	rva      uint64
	slot     int
	scsiTask *scsi.Task
	badLUN   bool
}

// scsiCommand takes a SCSI Command PDU off the receive buffer (its
// immediate data into the task's data buffer) and runs it on its own
// goroutine.
func (c *conn) scsiCommand(m Message) {
	c.t.Stats.Commands.Add(1)
	h := m.BHS
	tk := task{itt: h.ITT(), edtl: int(h.EDTL()), read: h.Flags()&flagRead != 0, write: h.Flags()&flagWrite != 0}
	copy(tk.cdb[:], h.CDB())
	lun, ok := scsi.DecodeLUN(h.LUN())
	tk.lun, tk.badLUN = lun, !ok
	tk.wstag, tk.wva, _ = m.Hdr.WriteSTag()
	tk.rstag, tk.rva, _ = m.Hdr.ReadSTag()
	if _, _, ok := m.Hdr.WriteSTag(); !ok {
		tk.wstag = 0
	}
	if _, _, ok := m.Hdr.ReadSTag(); !ok {
		tk.rstag = 0
	}
	if h.AHSLen() != 0 || (tk.read && tk.write) || tk.edtl > maxBurst || len(m.Data) > tk.edtl ||
		(len(m.Data) > 0 && !tk.write) {
		// Bidirectional commands and extended CDBs are not served.
		c.reject(h, 0x09) // invalid PDU field
		return
	}
	c.Mu.Lock()
	c.inflight++
	c.Mu.Unlock()
	slot, ok := rdmatarget.SlotFrom(c.DataFree)
	if !ok {
		// The window keeps this from happening with a correct
		// initiator.
		c.respond(&tk, scsi.Result{Status: scsi.StatusTaskSetFull}, nil)
		return
	}
	tk.slot = slot
	tk.imm = copy(c.data(tk.slot), m.Data)
	st, ok := c.t.scsi.Begin(c, tk.lun, uint64(tk.itt))
	if !ok {
		c.DataFree <- tk.slot
		c.respond(&tk, scsi.Result{Status: scsi.StatusCheckCondition,
			Sense: scsi.Sense{Key: scsi.KeyIllegalRequest, ASC: 0x4e}}, nil) // OVERLAPPED COMMANDS ATTEMPTED
		return
	}
	tk.scsiTask = st
	c.Tasks.Add(1)
	go c.run(tk)
}

func (c *conn) data(slot int) []byte {
	return c.DataMR.Buf()[slot*maxBurst : (slot+1)*maxBurst]
}

// run moves a command's data-out in, executes it, and sends its data-in
// and response.
func (c *conn) run(tk task) {
	defer c.Tasks.Done()
	defer c.t.scsi.End(tk.scsiTask)
	defer func() { c.DataFree <- tk.slot }()
	buf := c.data(tk.slot)[:tk.edtl]
	var rw rdmarw.Ctx
	if tk.write && tk.edtl > tk.imm {
		if tk.wstag == 0 {
			c.respond(&tk, scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseInvalidFieldCDB}, nil)
			return
		}
		if err := c.rdmaRead(&rw, &tk); err != nil {
			if !tk.scsiTask.Aborted() {
				c.Shutdown(fmt.Sprintf("RDMA READ: %v", err))
			}
			return
		}
	}
	var res scsi.Result
	if tk.badLUN {
		res = scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseLUNNotSupported}
	} else {
		res = c.t.scsi.Execute(tk.lun, tk.cdb[:], buf)
	}
	if tk.scsiTask.Aborted() {
		// ABORT TASK or LUN RESET: no response for this task.
		c.Mu.Lock()
		c.inflight--
		c.Mu.Unlock()
		return
	}
	var in *rdmarw.Ctx
	if res.DataIn > 0 && tk.read {
		if tk.rstag == 0 {
			res = scsi.Result{Status: scsi.StatusCheckCondition, Sense: scsi.SenseInvalidFieldCDB}
		} else {
			sge := c.DataMR.SGE(tk.slot*maxBurst, res.DataIn)
			if _, err := rw.Init(c.QP, c.PD, []verbs.SGE{sge}, 0, tk.rva, tk.rstag, rdmarw.Write); err != nil {
				c.Shutdown(fmt.Sprintf("RDMA WRITE: %v", err))
				return
			}
			in = &rw
		}
	}
	c.respond(&tk, res, in)
	if in != nil {
		// The chain's SEND completing means the WRITEs did (RC order);
		// the context holds no MR for a single SGE, so it can go now.
		rw.Destroy()
	}
}

// rdmaRead fetches the data-out beyond the immediate data.
func (c *conn) rdmaRead(rw *rdmarw.Ctx, tk *task) error {
	sge := c.DataMR.SGE(tk.slot*maxBurst+tk.imm, tk.edtl-tk.imm)
	return c.Read(rw, tk.slot, sge, tk.wva, tk.wstag)
}

// respond sends the SCSI Response (after the data-in WRITEs of in).
func (c *conn) respond(tk *task, res scsi.Result, in *rdmarw.Ctx) {
	var sense [2 + scsi.FixedSenseLen]byte
	err := c.postPDU(func(h BHS) []byte {
		h[0], h[1] = OpSCSIRsp, flagFinal
		h[3] = byte(res.Status)
		h.PutU32(16, tk.itt)
		moved := 0
		switch {
		case tk.read:
			moved = res.DataIn
		case tk.write:
			moved = tk.edtl
		}
		if res.Status == scsi.StatusGood && tk.read && moved < tk.edtl {
			h[1] |= flagUnderflow
			h.PutU32(44, uint32(tk.edtl-moved))
		}
		if res.Status == scsi.StatusCheckCondition {
			binary.BigEndian.PutUint16(sense[:], scsi.FixedSenseLen)
			res.Sense.PutFixed(sense[2:])
			return sense[:]
		}
		return nil
	}, in, false, true)
	if err != nil && err != errClosing {
		c.Shutdown(fmt.Sprintf("post response: %v", err))
	}
}

// TMF functions (RFC 7143 §11.5.1) and responses.
const (
	tmfAbortTask    = 1
	tmfAbortTaskSet = 2
	tmfLUNReset     = 5
	tmfRspComplete  = 0
	tmfRspNoTask    = 1
	tmfRspNoLUN     = 2
	tmfRspNotSupp   = 5
)

// tmf runs a task management function; the response waits (on its own
// goroutine) until the affected tasks ended.
func (c *conn) tmf(m Message) {
	c.t.Stats.TMFs.Add(1)
	h := m.BHS
	itt := h.ITT()
	lun, ok := scsi.DecodeLUN(h.LUN())
	var rsp byte = tmfRspComplete
	done := rdmatarget.Closed
	switch fn := h.Flags() & 0x7f; {
	case !ok:
		rsp = tmfRspNoLUN
	case fn == tmfAbortTask:
		r, d := c.t.scsi.AbortTask(c, lun, uint64(h.U32(20)))
		if r == scsi.TMFTaskNotFound {
			rsp = tmfRspNoTask
		}
		done = d
	case fn == tmfAbortTaskSet:
		done = c.t.scsi.AbortNexus(c)
	case fn == tmfLUNReset:
		r, d := c.t.scsi.ResetLUN(lun)
		if r == scsi.TMFLUNNotFound {
			rsp = tmfRspNoLUN
		}
		done = d
	default:
		rsp = tmfRspNotSupp
	}
	c.Tasks.Add(1)
	go func() {
		defer c.Tasks.Done()
		<-done
		c.send(func(h BHS) []byte {
			h[0], h[1], h[2] = OpTMFRsp, flagFinal, rsp
			h.PutU32(16, itt)
			return nil
		}, false)
	}()
}
