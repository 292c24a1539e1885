package cm

import (
	"fmt"

	"softib/verbs"
	"softib/wire/mad"
)

// InitQPAttr returns the attributes and mask that move the connection's
// QP to state (INIT, RTR or RTS), computed from the exchanged REQ/REP
// parameters as ib_cm_init_qp_attr does. The caller applies them with
// QP.Modify; the CM never touches the QP.
//
//   - INIT: access flags (remote write, plus remote read and atomic when
//     responder resources were granted), P_Key index, port.
//   - RTR: address vector of the primary path (and alternate if loaded),
//     path MTU, remote QPN, receive PSN (this side's own StartingPSN; a
//     passive side that moves to RTR before SendREP sets RQPSN to the
//     PSN it will put into the REP, as ipoib_cm and rdma_cm do); for RC
//     also max_dest_rd_atomic and min_rnr_timer.
//   - RTS: send PSN (the peer's StartingPSN); for RC also ACK timeout, retry counts and
//     max_rd_atomic.
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	if err := id.lock(); err != nil {
		return verbs.QPAttr{}, 0, err
	}
	defer id.unlock()
	var a verbs.QPAttr
	var mask verbs.QPAttrMask
	s := id.state
	switch state {
	case verbs.QPStateInit:
		switch s {
		case StateREQSent, StateMRAREQRcvd, StateREQRcvd, StateMRAREQSent, StateREPRcvd,
			StateMRAREPSent, StateREPSent, StateMRAREPRcvd, StateEstablished:
		default:
			return a, 0, stateErr("init QP attributes for INIT", s)
		}
		mask = verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		a.AccessFlags = verbs.AccessRemoteWrite
		if id.respRes > 0 {
			a.AccessFlags |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		}
		a.PKeyIndex = id.pkeyIndex
		a.PortNum = 1
	case verbs.QPStateRTR:
		switch s {
		case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent, StateREPSent,
			StateMRAREPRcvd, StateEstablished:
		default:
			return a, 0, stateErr("init QP attributes for RTR", s)
		}
		mask = verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		a.AH = id.ahFor(&id.primary)
		a.PathMTU = verbs.MTU(id.pathMTU)
		a.DestQPN = id.remoteQPN
		a.RQPSN = id.rqPSN
		if id.qpType == mad.TransportRC || id.qpType == mad.TransportXRC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
			a.MaxDestRdAtomic = id.respRes
			a.MinRNRTimer = 0
		}
		if !id.alt.IsZero() {
			mask |= verbs.QPAttrAltPath
			a.AltAH = id.ahFor(&id.alt)
			a.AltPortNum = 1
			a.AltPKeyIndex = id.pkeyIndex
			a.AltTimeout = uint8(id.alt.LocalAckTimeout)
		}
	case verbs.QPStateRTS:
		switch s {
		case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent, StateREPSent,
			StateMRAREPRcvd, StateEstablished, StateLAPSent, StateLAPRcvd, StateMRALAPSent, StateMRALAPRcvd:
		default:
			return a, 0, stateErr("init QP attributes for RTS", s)
		}
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		a.SQPSN = id.sqPSN
		if id.qpType == mad.TransportRC || id.qpType == mad.TransportXRC {
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
			a.Timeout = uint8(id.ackTimeout)
			a.RetryCnt = id.retryCount
			a.RNRRetry = id.rnrRetryCount
			a.MaxRdAtomic = id.initDepth
		}
	default:
		return a, 0, fmt.Errorf("cm: init QP attributes for %v: %w", state, ErrInvalidParam)
	}
	a.State = state
	return a, mask, nil
}

// ahFor builds the QP address vector of a path (ours-view): the remote
// GID as destination, hop limit, traffic class, flow label, SL and the
// local GID index and UDP port of the CM peer address.
func (id *ID) ahFor(p *mad.Path) verbs.AHAttr {
	return AHAttrFromPath(p, id.remote.AH.GRH.SGIDIndex, id.remote.AH.DPort)
}
