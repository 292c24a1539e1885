package verbs

import (
	"errors"
	"fmt"
	"net"
)

// Sentinel errors returned by verbs calls. Providers wrap them with detail
// (fmt.Errorf("...: %w", ErrInvalidAttr)), so test with errors.Is.
var (
	// ErrInvalidArgument: a malformed argument (EINVAL).
	ErrInvalidArgument = errors.New("verbs: invalid argument")
	// ErrInvalidAttr: an attribute out of range or not allowed for the
	// transition (EINVAL from ibv_modify_qp).
	ErrInvalidAttr = errors.New("verbs: invalid attribute")
	// ErrQPState: the operation is not allowed in the QP's current state,
	// or an illegal state transition was requested.
	ErrQPState = errors.New("verbs: invalid QP state")
	// ErrQueueFull: the send or receive queue (or SRQ, or CQ) has no room
	// (ENOMEM from ibv_post_send).
	ErrQueueFull = errors.New("verbs: queue full")
	// ErrInvalidLKey: an SGE's lkey names no MR of this PD, or the range
	// is outside it, or the MR lacks the needed access.
	ErrInvalidLKey = errors.New("verbs: invalid lkey or range")
	// ErrNotSupported: the provider or QP type does not offer the
	// operation (EOPNOTSUPP).
	ErrNotSupported = errors.New("verbs: operation not supported")
	// ErrBusy: the object is still in use (destroying a PD with MRs or
	// QPs, a CQ with QPs attached) (EBUSY).
	ErrBusy = errors.New("verbs: resource busy")
	// ErrResourceLimit: a device limit was reached (max QPs, MRs, ...).
	ErrResourceLimit = errors.New("verbs: resource limit reached")
	// ErrNoProvider: no provider is registered under the requested name.
	ErrNoProvider = errors.New("verbs: no such provider")
	// ErrCQOverrun: the CQ overflowed; completions were lost and the CQ
	// is in error (an EventCQErr async event was raised).
	ErrCQOverrun = errors.New("verbs: completion queue overrun")
)

// ErrClosed is returned for operations on a destroyed object or closed
// device. It wraps net.ErrClosed.
var ErrClosed = fmt.Errorf("verbs: object destroyed: %w", net.ErrClosed)

// WCError is a failed work completion as an error.
type WCError struct {
	Status WCStatus
	WRID   uint64
	Opcode WCOpcode
}

func (e *WCError) Error() string {
	return fmt.Sprintf("verbs: %v completion for wr_id %d: %s (%s)", e.Opcode, e.WRID, e.Status, e.Status.ID())
}

// Is reports whether target is a *WCError with the same status, so that
// errors.Is(err, &verbs.WCError{Status: verbs.WCRemAccessErr}) works.
func (e *WCError) Is(target error) bool {
	t, ok := target.(*WCError)
	return ok && t.Status == e.Status
}
