//go:build ibverbs && linux && cgo

package ibverbs

/*
#include "sib.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"softib/verbs"
)

var _ verbs.McastAttacher = (*qp)(nil)

// AttachMcast implements verbs.McastAttacher with ibv_attach_mcast (the
// kernel checks the QP type and the MGID, and on RoCE joins nothing: the
// IP group is the RDMA CM's business).
func (q *qp) AttachMcast(mgid verbs.GID, mlid uint16) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	var g C.union_ibv_gid
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&g)), 16), mgid[:])
	if err := rcErr(C.ibv_attach_mcast(q.qp, &g, C.uint16_t(mlid)), "ibverbs: attach multicast"); err != nil {
		return fmt.Errorf("%w (MGID %v)", err, mgid)
	}
	return nil
}

// DetachMcast implements verbs.McastAttacher with ibv_detach_mcast.
func (q *qp) DetachMcast(mgid verbs.GID, mlid uint16) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	var g C.union_ibv_gid
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&g)), 16), mgid[:])
	if err := rcErr(C.ibv_detach_mcast(q.qp, &g, C.uint16_t(mlid)), "ibverbs: detach multicast"); err != nil {
		return fmt.Errorf("%w (MGID %v)", err, mgid)
	}
	return nil
}
