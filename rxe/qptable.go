package rxe

import (
	"fmt"
	"sync/atomic"

	"softib/internal/seqnum"
	"softib/verbs"
)

// qpTable maps 24-bit QPNs to QPs for the receive path: lookups are two
// atomic loads with no lock and no allocation; inserts and removals (under
// Device.mu) cost O(1). The QPN space is split into 4096 pages of 4096
// slots, allocated on first use: QPNs are handed out in sequence, so a
// device with a few QPs holds one 32 KiB page.
type qpTable struct {
	pages [qpPages]atomic.Pointer[qpPage]
	n     int // QPs in the table (Device.mu)
}

const (
	qpPageBits = 12
	qpPages    = 1 << (24 - qpPageBits)
	qpPageMask = 1<<qpPageBits - 1
)

type qpPage [1 << qpPageBits]atomic.Pointer[QP]

// get returns the QP with number qpn, or nil.
func (t *qpTable) get(qpn uint32) *QP {
	p := t.pages[(qpn>>qpPageBits)&(qpPages-1)].Load()
	if p == nil {
		return nil
	}
	return p[qpn&qpPageMask].Load()
}

// put installs q under qpn (Device.mu held; the slot must be free).
func (t *qpTable) put(qpn uint32, q *QP) {
	i := (qpn >> qpPageBits) & (qpPages - 1)
	p := t.pages[i].Load()
	if p == nil {
		p = new(qpPage)
		t.pages[i].Store(p)
	}
	p[qpn&qpPageMask].Store(q)
	t.n++
}

// remove clears qpn's slot if it holds q (Device.mu held).
func (t *qpTable) remove(qpn uint32, q *QP) {
	p := t.pages[(qpn>>qpPageBits)&(qpPages-1)].Load()
	if p != nil && p[qpn&qpPageMask].CompareAndSwap(q, nil) {
		t.n--
	}
}

func (d *Device) addQP(q *QP) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return verbs.ErrClosed
	}
	if q.typ == verbs.QPTypeGSI {
		if d.gsi.Load() != nil {
			return fmt.Errorf("rxe: GSI QP exists: %w", verbs.ErrBusy)
		}
		q.qpn = 1
		d.gsi.Store(q)
		d.qps[q] = struct{}{}
		return nil
	}
	if d.qpTable.n >= MaxQP {
		return fmt.Errorf("rxe: create QP: %w", verbs.ErrResourceLimit)
	}
	for {
		qpn := d.nextQPN
		d.nextQPN++
		if d.nextQPN > seqnum.Mask {
			d.nextQPN = firstUserQPN
		}
		if d.qpTable.get(qpn) == nil {
			q.qpn = qpn
			break
		}
	}
	d.qpTable.put(q.qpn, q)
	d.qps[q] = struct{}{}
	return nil
}

func (d *Device) removeQP(q *QP) {
	d.detachAllMcast(q) // mcast.go; before d.mu (lock order)
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.qps, q)
	if q.qpn == 1 {
		d.gsi.CompareAndSwap(q, nil)
		return
	}
	d.qpTable.remove(q.qpn, q)
}
