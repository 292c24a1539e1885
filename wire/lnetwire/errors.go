package lnetwire

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped) by the decoders of this package.
var (
	// ErrShort reports a buffer shorter than the structure it must hold.
	ErrShort = errors.New("lnetwire: buffer too short")
	// ErrBadNID reports a NID or net string (or value) that cannot be parsed.
	ErrBadNID = errors.New("lnetwire: bad NID")
	// ErrBadType reports an unknown LNet message type.
	ErrBadType = errors.New("lnetwire: bad message type")
	// ErrBadMagic reports a magic number that is neither native nor swapped.
	ErrBadMagic = errors.New("lnetwire: bad magic")
	// ErrBadVersion reports an unsupported protocol version.
	ErrBadVersion = errors.New("lnetwire: bad version")
)

// NIDError describes why a NID or net string was rejected. It matches
// ErrBadNID with errors.Is.
type NIDError struct {
	Input  string // the string given to ParseNID/ParseNet
	Reason string // what is wrong with it
}

// Error describes the input and the reason.
func (e *NIDError) Error() string {
	return fmt.Sprintf("lnetwire: bad NID %q: %s", e.Input, e.Reason)
}

// Is makes errors.Is(err, ErrBadNID) true.
func (e *NIDError) Is(target error) bool { return target == ErrBadNID }

// shortError wraps ErrShort with what was being decoded.
func shortError(what string, need, have int) error {
	return fmt.Errorf("%w: %s needs %d bytes, have %d", ErrShort, what, need, have)
}
