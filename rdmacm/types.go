// Package rdmacm is the RDMA connection manager with librdmacm semantics
// on softib devices: event channels and IDs, the TCP, UDP and IB port
// spaces, address and route resolution on the devices a [Manager] knows,
// listen with a backlog, connect, accept, reject, disconnect and every
// event, over the IB CM (package cm) on each device's QP1. It speaks the
// Linux rdma_cm wire format: service IDs (port space << 16) + port, the
// 36-byte cma_hdr in front of REQ and SIDR_REQ private data, and the
// private-data limits 56 (connect), 196 (accept), 148 (reject) and 180
// (UD resolve), enforced with *PrivateDataError.
//
// Events arrive on an [EventChannel]; IDs created for incoming requests
// report to their listener's channel.
package rdmacm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"softib/verbs"
	"softib/wire/mad"
)

// PortSpace is an RDMA CM port space.
type PortSpace = mad.PortSpace

// Port spaces (rdma_port_space).
const (
	PSTCP   = mad.PSTCP
	PSUDP   = mad.PSUDP
	PSIB    = mad.PSIB
	PSIPoIB = mad.PSIPoIB
)

// EventType is an RDMA CM event (enum rdma_cm_event_type).
type EventType uint8

// Event types.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
	numEvents
)

var eventNames = [numEvents]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
	"DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE",
	"TIMEWAIT_EXIT",
}

// String returns the librdmacm name without the RDMA_CM_EVENT_ prefix.
func (e EventType) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", uint8(e))
}

// State is the state of an RDMA CM ID (the kernel's enum rdma_cm_state).
type State uint8

// ID states.
const (
	StateIdle State = iota
	StateAddrQuery
	StateAddrResolved
	StateRouteQuery
	StateRouteResolved
	StateConnect
	StateDisconnect
	StateAddrBound
	StateListen
	StateDeviceRemoval
	StateDestroying
	numStates
)

var stateNames = [numStates]string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY",
	"ROUTE_RESOLVED", "CONNECT", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING"}

// String returns the state name without the RDMA_CM_ prefix.
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// transitions[from] lists the states an ID may move to; setState
// enforces it.
var transitions = [numStates][]State{
	StateIdle:          {StateAddrBound, StateAddrQuery, StateDestroying},
	StateAddrBound:     {StateAddrQuery, StateListen, StateDestroying, StateDeviceRemoval},
	StateAddrQuery:     {StateAddrResolved, StateAddrBound, StateIdle, StateDestroying, StateDeviceRemoval},
	StateAddrResolved:  {StateRouteQuery, StateAddrQuery, StateDestroying, StateDeviceRemoval},
	StateRouteQuery:    {StateRouteResolved, StateAddrResolved, StateDestroying, StateDeviceRemoval},
	StateRouteResolved: {StateConnect, StateDestroying, StateDeviceRemoval},
	StateConnect:       {StateDisconnect, StateDestroying, StateDeviceRemoval},
	StateDisconnect:    {StateDestroying, StateDeviceRemoval},
	StateListen:        {StateAddrBound, StateDestroying, StateDeviceRemoval}, // ADDR_BOUND: listen failed
	StateDeviceRemoval: {StateDestroying},
	StateDestroying:    {},
}

// CanTransition reports whether the state table allows from → to.
func CanTransition(from, to State) bool {
	if from >= numStates {
		return false
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// ConnParam are connection parameters (struct rdma_conn_param).
type ConnParam struct {
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	RetryCount         uint8 // capped at 7
	RNRRetryCount      uint8 // capped at 7
	SRQ                bool
	// QPNum is the QP number to advertise when the ID has no QP of its
	// own (rdma_conn_param.qp_num); in events, the peer's QPN.
	QPNum uint32
}

// UDParam are the parameters of a UD "connection" (struct rdma_ud_param):
// how to reach the remote UD QP.
type UDParam struct {
	PrivateData []byte
	AH          verbs.AHAttr
	QPNum       uint32
	QKey        uint32
}

// Event is one RDMA CM event (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the ID the event is about; for CONNECT_REQUEST a new ID for
	// the request.
	ID *ID
	// ListenID is the listening ID of a CONNECT_REQUEST.
	ListenID *ID
	// Status is the librdmacm status: the reject reason for REJECTED, a
	// negative errno (-ETIMEDOUT, ...) for errors, 0 otherwise.
	Status int
	// Err describes a failure (wrapping cm.ErrTimeout, *cm.RejectError,
	// ...); nil on success.
	Err error
	// Conn is set for connected port spaces (TCP, IB).
	Conn ConnParam
	// UD is set for UD port spaces (UDP), and for MULTICAST_JOIN.
	UD UDParam
	// McastAddr is the group of MULTICAST_JOIN and MULTICAST_ERROR.
	McastAddr netip.Addr
	// McastContext is the context given to JoinMulticast (what
	// librdmacm returns in the event's ud.private_data).
	McastContext any
}

// Ack acknowledges the event (rdma_ack_cm_event). Events own their
// data, so this only exists for API parity.
func (e *Event) Ack() {}

// Errno values used in Event.Status (Linux numbering).
const (
	ETIMEDOUT     = 110
	ECONNREFUSED  = 111
	EINVAL        = 22
	ENODEV        = 19
	EADDRNOTAVAIL = 99
	ENOSYS        = 38
)

// Errors; test with errors.Is.
var (
	// ErrPrivateDataTooLong is matched by every *PrivateDataError.
	ErrPrivateDataTooLong = errors.New("rdmacm: private data too long")
	// ErrState means the call is not valid in the ID's state (EINVAL).
	ErrState = errors.New("rdmacm: invalid state")
	// ErrNoDevice means no softib device owns the address (EADDRNOTAVAIL).
	ErrNoDevice = errors.New("rdmacm: no device for address")
	// ErrAddrInUse means the port is already bound (EADDRINUSE).
	ErrAddrInUse = errors.New("rdmacm: address in use")
	// ErrInvalid means a malformed argument (EINVAL).
	ErrInvalid = errors.New("rdmacm: invalid argument")
	// ErrClosed means the manager or channel was closed; it wraps
	// net.ErrClosed.
	ErrClosed = fmt.Errorf("rdmacm: closed: %w", net.ErrClosed)
)

// PrivateDataError reports private data over an RDMA CM limit.
type PrivateDataError struct {
	Op  string // "connect", "accept", "reject", "resolve" (UD connect)
	Len int
	Max int
}

// Error describes the violation.
func (e *PrivateDataError) Error() string {
	return fmt.Sprintf("rdmacm: %s private data %d bytes, max %d", e.Op, e.Len, e.Max)
}

// Is matches ErrPrivateDataTooLong.
func (e *PrivateDataError) Is(target error) bool { return target == ErrPrivateDataTooLong }

func checkPD(op string, p []byte, max int) error {
	if len(p) > max {
		return &PrivateDataError{Op: op, Len: len(p), Max: max}
	}
	return nil
}

// netipPort builds an address with the port taken from a service ID or
// a cma_hdr port.
func netipPort(a netip.Addr, portOrSID uint64) netip.AddrPort {
	return netip.AddrPortFrom(a, uint16(portOrSID))
}
