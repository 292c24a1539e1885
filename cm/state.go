package cm

import "fmt"

// State is the state of a CM ID (linux ib_cm.h enum ib_cm_state; IBTA Vol 1
// §12.9 communication state machine). The load-alternate-path states are
// folded into the main state as in the original ib_cm.h proposal.
type State uint8

// CM ID states.
const (
	StateIdle State = iota
	StateListen
	StateREQSent
	StateREQRcvd
	StateMRAREQSent
	StateMRAREQRcvd
	StateREPSent
	StateREPRcvd
	StateMRAREPSent
	StateMRAREPRcvd
	StateEstablished
	StateLAPSent
	StateLAPRcvd
	StateMRALAPSent
	StateMRALAPRcvd
	StateDREQSent
	StateDREQRcvd
	StateTimewait
	StateSIDRREQSent
	StateSIDRREQRcvd
	numStates
)

var stateNames = [numStates]string{
	"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD",
	"REP_SENT", "REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED",
	"LAP_SENT", "LAP_RCVD", "MRA_LAP_SENT", "MRA_LAP_RCVD", "DREQ_SENT",
	"DREQ_RCVD", "TIMEWAIT", "SIDR_REQ_SENT", "SIDR_REQ_RCVD",
}

// String returns the ib_cm name of the state without the IB_CM_ prefix.
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// States lists every state.
func States() []State {
	out := make([]State, numStates)
	for i := range out {
		out[i] = State(i)
	}
	return out
}

// transitions is the state table: transitions[from] lists every state a
// CM ID may move to from "from". setState enforces it.
var transitions = [numStates][]State{
	StateIdle:        {StateListen, StateREQSent, StateREQRcvd, StateSIDRREQSent, StateSIDRREQRcvd},
	StateListen:      {StateIdle},
	StateREQSent:     {StateREPRcvd, StateMRAREQRcvd, StateIdle, StateTimewait},
	StateMRAREQRcvd:  {StateREPRcvd, StateIdle, StateTimewait},
	StateREQRcvd:     {StateREPSent, StateMRAREQSent, StateIdle, StateTimewait},
	StateMRAREQSent:  {StateREPSent, StateIdle, StateTimewait},
	StateREPSent:     {StateEstablished, StateMRAREPRcvd, StateDREQRcvd, StateIdle, StateTimewait},
	StateMRAREPRcvd:  {StateEstablished, StateDREQRcvd, StateIdle, StateTimewait},
	StateREPRcvd:     {StateEstablished, StateMRAREPSent, StateTimewait},
	StateMRAREPSent:  {StateEstablished, StateTimewait},
	StateEstablished: {StateDREQSent, StateDREQRcvd, StateLAPSent, StateLAPRcvd, StateTimewait},
	StateLAPSent:     {StateEstablished, StateMRALAPRcvd, StateDREQSent, StateDREQRcvd, StateTimewait},
	StateMRALAPRcvd:  {StateEstablished, StateDREQSent, StateDREQRcvd, StateTimewait},
	StateLAPRcvd:     {StateEstablished, StateMRALAPSent, StateDREQSent, StateDREQRcvd, StateTimewait},
	StateMRALAPSent:  {StateEstablished, StateDREQSent, StateDREQRcvd, StateTimewait},
	StateDREQSent:    {StateDREQRcvd, StateTimewait},
	StateDREQRcvd:    {StateTimewait},
	StateTimewait:    {StateIdle},
	StateSIDRREQSent: {StateIdle},
	StateSIDRREQRcvd: {StateIdle},
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

// isConnected reports states in which the connection is up (data may
// flow and a DREQ is the way down).
func (s State) isConnected() bool {
	switch s {
	case StateEstablished, StateLAPSent, StateLAPRcvd, StateMRALAPSent, StateMRALAPRcvd:
		return true
	}
	return false
}

// EventType is a CM event delivered to an ID's handler (linux ib_cm.h
// enum ib_cm_event_type).
type EventType uint8

// CM event types.
const (
	EventREQError EventType = iota
	EventREQReceived
	EventREPError
	EventREPReceived
	EventRTUReceived
	EventUserEstablished
	EventDREQError
	EventDREQReceived
	EventDREPReceived
	EventTimewaitExit
	EventMRAReceived
	EventREJReceived
	EventLAPError
	EventLAPReceived
	EventAPRReceived
	EventSIDRREQError
	EventSIDRREQReceived
	EventSIDRREPReceived
	numEvents
)

var eventNames = [numEvents]string{
	"REQ_ERROR", "REQ_RECEIVED", "REP_ERROR", "REP_RECEIVED", "RTU_RECEIVED",
	"USER_ESTABLISHED", "DREQ_ERROR", "DREQ_RECEIVED", "DREP_RECEIVED",
	"TIMEWAIT_EXIT", "MRA_RECEIVED", "REJ_RECEIVED", "LAP_ERROR", "LAP_RECEIVED",
	"APR_RECEIVED", "SIDR_REQ_ERROR", "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED",
}

// String returns the ib_cm name of the event without the IB_CM_ prefix.
func (e EventType) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", uint8(e))
}

// EventTypes lists every event type.
func EventTypes() []EventType {
	out := make([]EventType, numEvents)
	for i := range out {
		out[i] = EventType(i)
	}
	return out
}
