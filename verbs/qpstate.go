package verbs

import "fmt"

// transitionRule lists, for one QP state transition, the attributes a
// Modify must carry (req) and may carry (opt), per QP type. The table
// follows IBTA Vol 1 §10.3 / §11.2.4.2 (the QP state transition table).
type transitionRule struct {
	valid bool
	req   map[QPType]QPAttrMask
	opt   map[QPType]QPAttrMask
}

const (
	rcRTRReq  = QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	ucRTRReq  = QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	rcRTSReq  = QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxQPRdAtomic
	udInitReq = QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
	rcInitReq = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	gsiKeys   = QPAttrPKeyIndex | QPAttrQKey
)

func all4(ud, uc, rc, gsi QPAttrMask) map[QPType]QPAttrMask {
	return map[QPType]QPAttrMask{QPTypeUD: ud, QPTypeUC: uc, QPTypeRC: rc, QPTypeGSI: gsi}
}

var anyToReset = transitionRule{valid: true}

// qpTransitions[cur][next].
var qpTransitions = [7][7]transitionRule{
	QPStateReset: {
		QPStateReset: anyToReset,
		QPStateInit:  {valid: true, req: all4(udInitReq, rcInitReq, rcInitReq, gsiKeys)},
		QPStateErr:   anyToReset,
	},
	QPStateInit: {
		QPStateReset: anyToReset,
		QPStateErr:   anyToReset,
		QPStateInit:  {valid: true, opt: all4(udInitReq, rcInitReq, rcInitReq, gsiKeys)},
		QPStateRTR: {valid: true,
			req: all4(0, ucRTRReq, rcRTRReq, 0),
			opt: all4(QPAttrPKeyIndex|QPAttrQKey,
				QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex,
				QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex,
				gsiKeys)},
	},
	QPStateRTR: {
		QPStateReset: anyToReset,
		QPStateErr:   anyToReset,
		QPStateRTS: {valid: true,
			req: all4(QPAttrSQPSN, QPAttrSQPSN, rcRTSReq, QPAttrSQPSN),
			opt: all4(QPAttrCurState|QPAttrQKey,
				QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrPathMigState,
				QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrMinRNRTimer|QPAttrPathMigState,
				QPAttrCurState|QPAttrQKey)},
	},
	QPStateRTS: {
		QPStateReset: anyToReset,
		QPStateErr:   anyToReset,
		QPStateRTS: {valid: true,
			opt: all4(QPAttrCurState|QPAttrQKey,
				QPAttrCurState|QPAttrAccessFlags|QPAttrAltPath|QPAttrPathMigState,
				QPAttrCurState|QPAttrAccessFlags|QPAttrAltPath|QPAttrPathMigState|QPAttrMinRNRTimer,
				QPAttrCurState|QPAttrQKey)},
		QPStateSQD: {valid: true,
			opt: all4(QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify)},
	},
	QPStateSQD: {
		QPStateReset: anyToReset,
		QPStateErr:   anyToReset,
		QPStateRTS: {valid: true,
			opt: all4(QPAttrCurState|QPAttrQKey,
				QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrPathMigState,
				QPAttrCurState|QPAttrAltPath|QPAttrAccessFlags|QPAttrMinRNRTimer|QPAttrPathMigState,
				QPAttrCurState|QPAttrQKey)},
		QPStateSQD: {valid: true,
			opt: all4(QPAttrPKeyIndex|QPAttrQKey,
				QPAttrAV|QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex|QPAttrPathMigState,
				QPAttrPort|QPAttrAV|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic|
					QPAttrMaxDestRdAtomic|QPAttrAltPath|QPAttrAccessFlags|QPAttrPKeyIndex|
					QPAttrMinRNRTimer|QPAttrPathMigState,
				QPAttrPKeyIndex|QPAttrQKey)},
	},
	QPStateSQE: {
		QPStateReset: anyToReset,
		QPStateErr:   anyToReset,
		// RC has no SQE state: its send-queue errors move the QP to ERR.
		QPStateRTS: {valid: true,
			req: map[QPType]QPAttrMask{},
			opt: map[QPType]QPAttrMask{
				QPTypeUD:  QPAttrCurState | QPAttrQKey,
				QPTypeUC:  QPAttrCurState | QPAttrAccessFlags,
				QPTypeGSI: QPAttrCurState | QPAttrQKey,
			}},
	},
	QPStateErr: {
		QPStateReset: anyToReset,
		QPStateErr:   anyToReset,
	},
}

// ModifyCheck validates a Modify of a QP of type t in state cur, like the
// kernel's ib_modify_qp_is_ok: the transition must be legal, every
// required attribute present and no attribute outside the required and
// optional sets. It returns the target state. A mask without QPAttrState
// asks for cur→cur, which only some states allow.
func ModifyCheck(t QPType, cur QPState, attr *QPAttr, mask QPAttrMask) (QPState, error) {
	if mask&QPAttrCurState != 0 && attr.CurState != cur {
		return cur, fmt.Errorf("%w: cur_state %v given, QP is %v", ErrQPState, attr.CurState, cur)
	}
	next := cur
	if mask&QPAttrState != 0 {
		next = attr.State
	}
	if cur > QPStateErr || next > QPStateErr {
		return cur, fmt.Errorf("%w: unknown state", ErrInvalidAttr)
	}
	r := qpTransitions[cur][next]
	if !r.valid || (cur == QPStateSQE && next == QPStateRTS && t == QPTypeRC) {
		return cur, fmt.Errorf("%w: %v QP cannot go %v→%v", ErrQPState, t, cur, next)
	}
	req, opt := r.req[t], r.opt[t]
	if mask&req != req {
		return cur, fmt.Errorf("%w: %v %v→%v needs %v, missing %v", ErrInvalidAttr, t, cur, next, req, req&^mask)
	}
	if extra := mask &^ (req | opt | QPAttrState); extra != 0 {
		return cur, fmt.Errorf("%w: %v %v→%v does not take %v", ErrInvalidAttr, t, cur, next, extra)
	}
	return next, nil
}
