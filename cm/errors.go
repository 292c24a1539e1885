package cm

import (
	"errors"
	"fmt"
	"net"

	"softib/wire/mad"
)

// Errors returned by CM calls; test with errors.Is.
var (
	// ErrState means the call is not valid in the ID's current state
	// (EINVAL from ib_cm).
	ErrState = errors.New("cm: invalid state for operation")
	// ErrBusy means the service ID is already being listened on (EBUSY).
	ErrBusy = errors.New("cm: service ID busy")
	// ErrTimeout means a request got no answer within MaxCMRetries
	// retransmissions; it is the Err of the *_ERROR events.
	ErrTimeout = errors.New("cm: response timeout")
	// ErrDestroyed means the ID was destroyed.
	ErrDestroyed = errors.New("cm: ID destroyed")
	// ErrClosed means the CM was closed; it wraps net.ErrClosed.
	ErrClosed = fmt.Errorf("cm: closed: %w", net.ErrClosed)
	// ErrPrivateDataTooLong means private data, ARI or additional info
	// exceeds its message area; it wraps mad.ErrTooLong.
	ErrPrivateDataTooLong = fmt.Errorf("cm: private data too long: %w", mad.ErrTooLong)
	// ErrQPNInTimewait means the local QPN still belongs to a connection
	// in timewait and must not be reused yet.
	ErrQPNInTimewait = errors.New("cm: QPN in timewait")
	// ErrInvalidParam means a malformed parameter (zero QPN, ...).
	ErrInvalidParam = errors.New("cm: invalid parameter")
	// ErrRejected is matched by every *RejectError.
	ErrRejected = errors.New("cm: rejected")
)

// RejectError reports a REJ: the reason, additional reject info and
// private data the peer sent (or, for locally detected stale connections,
// the reason the CM sent).
type RejectError struct {
	Reason      mad.RejectReason
	ARI         []byte
	PrivateData []byte
}

// Error describes the rejection.
func (e *RejectError) Error() string { return "cm: rejected: " + e.Reason.String() }

// Is matches ErrRejected.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }
