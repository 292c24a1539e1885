package rxe

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"softib/verbs"
)

// Control-path verbs (ib_modify_device, ib_modify_port, ib_peek_cq), as
// Linux rxe has them: rxe_modify_device changes the node description,
// rxe_modify_port sets and clears port capability bits and resets the
// Q_Key violation counter. The port's P_Key and Q_Key violation counters
// count what the receive checks drop (BadPKey, BadQKey), as rxe's
// set_bad_pkey_cntr and set_qkey_viol_cntr do.

var (
	_ verbs.DeviceModifier = (*Device)(nil)
	_ verbs.CQPeeker       = (*CQ)(nil)
)

// devCtl is what the control verbs changed.
type devCtl struct {
	mu       sync.Mutex
	nodeDesc string
	capSet   uint32 // port capability bits set by ModifyPort
	capClr   uint32 // and cleared
	qkeyBase uint64 // BadQKey at the last PortResetQKeyCntr
}

// ModifyDevice implements verbs.DeviceModifier: the node description
// (truncated to verbs.NodeDescMax bytes, as the kernel's copy is). The
// system image GUID is the node GUID and cannot be changed.
func (d *Device) ModifyDevice(mask verbs.DeviceModifyMask, attr *verbs.DeviceModify) error {
	if mask&^(verbs.DeviceModifyNodeDesc|verbs.DeviceModifySysImageGUID) != 0 {
		return fmt.Errorf("rxe: modify device: mask %#x: %w", mask, verbs.ErrInvalidArgument)
	}
	if mask&verbs.DeviceModifySysImageGUID != 0 {
		return fmt.Errorf("rxe: modify device: system image GUID: %w", verbs.ErrNotSupported)
	}
	if mask&verbs.DeviceModifyNodeDesc != 0 {
		desc := attr.NodeDesc
		if len(desc) > verbs.NodeDescMax {
			desc = desc[:verbs.NodeDescMax]
		}
		d.ctl.mu.Lock()
		d.ctl.nodeDesc = desc
		d.ctl.mu.Unlock()
	}
	return nil
}

// NodeDesc implements verbs.DeviceModifier. It starts as the device
// name, as rxe's node_desc does.
func (d *Device) NodeDesc() string {
	d.ctl.mu.Lock()
	defer d.ctl.mu.Unlock()
	if d.ctl.nodeDesc == "" {
		return d.Name()
	}
	return d.ctl.nodeDesc
}

// ModifyPort implements verbs.DeviceModifier: capability bits are set
// and cleared, PortResetQKeyCntr resets the Q_Key violation counter; a
// software port cannot be shut down or given an init type.
func (d *Device) ModifyPort(port uint8, mask verbs.PortModifyMask, attr *verbs.PortModify) error {
	if err := d.checkPort(port); err != nil {
		return err
	}
	if mask&(verbs.PortShutdown|verbs.PortInitType) != 0 {
		return fmt.Errorf("rxe: modify port: mask %#x: %w", mask, verbs.ErrNotSupported)
	}
	if mask&^verbs.PortResetQKeyCntr != 0 {
		return fmt.Errorf("rxe: modify port: mask %#x: %w", mask, verbs.ErrInvalidArgument)
	}
	c := &d.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	c.capSet = (c.capSet | attr.SetPortCapMask) &^ attr.ClrPortCapMask
	c.capClr = (c.capClr | attr.ClrPortCapMask) &^ attr.SetPortCapMask
	if mask&verbs.PortResetQKeyCntr != 0 {
		c.qkeyBase = d.stats.BadQKey.Load()
	}
	return nil
}

// port fills in what the control verbs changed and the violation
// counters (QueryPort).
func (c *devCtl) port(a *verbs.PortAttr, s *Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a.PortCapFlags = (a.PortCapFlags | c.capSet) &^ c.capClr
	a.BadPKeyCntr = uint32(min(s.BadPKey.Load(), 0xFFFF)) // 16-bit, saturating (IBA PortInfo)
	a.QKeyViolCntr = uint32(min(s.BadQKey.Load()-c.qkeyBase, 0xFFFF))
}

// Peek implements verbs.CQPeeker.
func (cq *CQ) Peek(n int) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return min(n, cq.n)
}

var _ verbs.QPDrainer = (*QP)(nil)

// DrainSQ implements verbs.QPDrainer (ib_drain_sq): the QP goes to ERR,
// which flushes both queues; the call waits for the send queue only.
func (q *QP) DrainSQ() error { return q.drainUntil(func() bool { return q.sq.len() == 0 }) }

// DrainRQ implements verbs.QPDrainer (ib_drain_rq). A QP on an SRQ has
// no receive queue of its own: moving it to ERR raises
// LAST_WQE_REACHED (modify.go) and flushes the WQE it was filling, and
// the call waits until it holds none.
func (q *QP) DrainRQ() error {
	return q.drainUntil(func() bool { return q.rq.len() == 0 && !q.resp.haveRWQE })
}

// drainUntil moves the QP to ERR and waits (QP.mu, drainC) until done
// holds, as Drain does for both queues.
func (q *QP) drainUntil(done func() bool) error {
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if q.state != verbs.QPStateErr {
		if q.state == verbs.QPStateReset {
			return fmt.Errorf("rxe: drain QP in RESET: %w", verbs.ErrQPState)
		}
		q.setState(verbs.QPStateErr)
	}
	for !done() && !q.dead && q.state == verbs.QPStateErr {
		q.drainC.Wait()
	}
	return nil
}

var (
	_ verbs.QPLister  = (*Device)(nil)
	_ verbs.AHQuerier = (*AH)(nil)
)

// QPs implements verbs.QPLister.
func (d *Device) QPs() []verbs.QP {
	d.mu.Lock()
	qs := make([]*QP, 0, len(d.qps))
	for q := range d.qps {
		qs = append(qs, q)
	}
	d.mu.Unlock()
	slices.SortFunc(qs, func(a, b *QP) int { return cmp.Compare(a.qpn, b.qpn) })
	out := make([]verbs.QP, len(qs))
	for i, q := range qs {
		out[i] = q
	}
	return out
}

// PD implements verbs.AHQuerier.
func (ah *AH) PD() verbs.PD { return ah.pd }
