// Package rdmautil holds the verbs plumbing the softib tools share:
// completion waiting that spins briefly and then sleeps on the CQ's
// completion channel, random PSNs, address vectors and QP transitions.
package rdmautil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"softib/verbs"
)

// DefaultSpin is how many empty polls Waiter makes before it arms the CQ
// and sleeps on its channel.
const DefaultSpin = 2000

// MaxSpinTime bounds a Waiter's spinning in time as well: an empty Poll
// may be a non-blocking recvmmsg (rxe's receive token), so 2000 of them
// can burn milliseconds of a shared CPU; 200 µs covers several loopback
// round trips.
const MaxSpinTime = 200 * time.Microsecond

// NewCQ creates a CQ of at least cqe entries with a completion channel of
// its own, so that a Waiter can sleep on it.
func NewCQ(dev verbs.Device, cqe int) (verbs.CQ, error) {
	return dev.CreateCQ(verbs.CQAttr{CQE: cqe, Channel: verbs.NewCompChannel(1)})
}

// Waiter waits for completions on one CQ created by NewCQ.
type Waiter struct {
	CQ verbs.CQ
	// Events makes Wait sleep on the completion channel at once, like the
	// rdma-core tools' -e (no spinning).
	Events bool
	// Spin is the number of empty polls before sleeping (0 = DefaultSpin).
	Spin int
}

// Wait returns at least one completion in wcs, or ctx's error.
func (w *Waiter) Wait(ctx context.Context, wcs []verbs.WC) (int, error) {
	if !w.Events {
		spin := w.Spin
		if spin <= 0 {
			spin = DefaultSpin
		}
		t0 := time.Now()
		for i := range spin {
			n, err := w.CQ.Poll(wcs)
			if n > 0 || err != nil {
				return n, err
			}
			if i%64 == 63 {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				if time.Since(t0) > MaxSpinTime {
					break
				}
				runtime.Gosched()
			}
		}
	}
	ch := w.CQ.Channel()
	for {
		if ch == nil {
			// No channel: poll with yields only.
			n, err := w.CQ.Poll(wcs)
			if n > 0 || err != nil {
				return n, err
			}
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			runtime.Gosched()
			continue
		}
		if err := w.CQ.ReqNotify(false); err != nil {
			return 0, err
		}
		// Poll after arming: a completion that arrived before the arm
		// raises no event.
		n, err := w.CQ.Poll(wcs)
		if n > 0 || err != nil {
			return n, err
		}
		select {
		case <-ch.C():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// RandPSN returns a random 24-bit PSN, like lrand48() & 0xffffff.
func RandPSN() uint32 { return rand.Uint32() & 0xffffff }

// Peer addresses a remote QP's port for an address vector.
type Peer struct {
	LID uint16
	GID verbs.GID
	// DPort is the peer's UDP port (0 = 4791).
	DPort uint16
}

// AV builds an address vector toward p from local port port. As in the
// rdma-core examples the GRH is used when the peer GID's interface ID is
// non-zero; sgidIndex < 0 selects index 0.
func AV(port uint8, p Peer, sgidIndex int, hopLimit, sl uint8) verbs.AHAttr {
	av := verbs.AHAttr{DLID: p.LID, SL: sl, PortNum: port, DPort: p.DPort}
	if p.GID.InterfaceID() != 0 {
		av.IsGlobal = true
		av.GRH = verbs.GlobalRoute{DGID: p.GID, HopLimit: hopLimit, SGIDIndex: uint8(max(sgidIndex, 0))}
	}
	return av
}

// RCConnect holds the attributes of an RC (or UC) RESET→RTS bring-up.
type RCConnect struct {
	Port            uint8
	Access          verbs.AccessFlags
	MTU             verbs.MTU
	DestQPN         uint32
	RQPSN, SQPSN    uint32
	AV              verbs.AHAttr
	MaxDestRdAtomic uint8
	MaxRdAtomic     uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
}

// ToInit moves a fresh RC QP to INIT (P_Key index 0).
func ToInit(qp verbs.QP, port uint8, access verbs.AccessFlags) error {
	a := verbs.QPAttr{State: verbs.QPStateInit, PortNum: port, AccessFlags: access}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("modify QP to INIT: %w", err)
	}
	return nil
}

// ToRTR moves an RC QP from INIT to RTR.
func ToRTR(qp verbs.QP, c *RCConnect) error {
	a := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: c.MTU, DestQPN: c.DestQPN, RQPSN: c.RQPSN,
		MaxDestRdAtomic: c.MaxDestRdAtomic, MinRNRTimer: c.MinRNRTimer, AH: c.AV}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("modify QP to RTR: %w", err)
	}
	return nil
}

// ToRTS moves an RC QP from RTR to RTS.
func ToRTS(qp verbs.QP, c *RCConnect) error {
	a := verbs.QPAttr{State: verbs.QPStateRTS, Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry,
		SQPSN: c.SQPSN, MaxRdAtomic: c.MaxRdAtomic}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
		verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("modify QP to RTS: %w", err)
	}
	return nil
}

// UDToRTS moves a fresh UD QP through INIT (with qkey) and RTR to RTS.
func UDToRTS(qp verbs.QP, port uint8, qkey, sqPSN uint32) error {
	a := verbs.QPAttr{State: verbs.QPStateInit, PortNum: port, QKey: qkey}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		return fmt.Errorf("modify UD QP to INIT: %w", err)
	}
	a = verbs.QPAttr{State: verbs.QPStateRTR}
	if err := qp.Modify(&a, verbs.QPAttrState); err != nil {
		return fmt.Errorf("modify UD QP to RTR: %w", err)
	}
	a = verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sqPSN}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("modify UD QP to RTS: %w", err)
	}
	return nil
}
