package selftest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"softib/wire/lnetwire"
)

// A console normally runs its own LNet node. On a host whose address is
// already a node's NID (lst run on a node, the usual case on a real
// cluster) that node cannot be reached from a second LNet instance with
// the same NID, so the console sends its RPCs through the local lnetd
// instead: the control-socket op "lst.call" (ProxyArgs → ProxyReply),
// served by Service.ProxyCall on the daemon's instance.

// ProxyOp is the lnetd control operation carrying console RPCs.
const ProxyOp = "lst.call"

// ProxyArgs is one console RPC for the local node to send.
type ProxyArgs struct {
	NID string `json:"nid"`
	Req []byte `json:"req"` // a framework request (MsgSize bytes)
	// Bulk, when set, is exposed for the node to GET (a TEST request's
	// destination list); the request's bulkid is set by the sender.
	Bulk    []byte        `json:"bulk,omitempty"`
	Timeout time.Duration `json:"timeout"`
}

// ProxyReply is the reply message (MsgSize bytes).
type ProxyReply struct {
	Rep []byte `json:"rep"`
}

// Caller sends one console request to a node's framework service and
// returns the reply (which may carry a non-zero status). bulk, if not
// nil, is what the node GETs (the request's bulkid is the caller's to
// set); its rpyid is set by the caller too.
type Caller func(ctx context.Context, to lnetwire.NID, req, bulk []byte, timeout time.Duration) ([]byte, error)

// ControlCall is how a console reaches an lnetd control socket: the
// lnetd client's Call method.
type ControlCall func(ctx context.Context, op string, args, result any) error

// ProxyCaller turns a control-socket call function into a Caller.
func ProxyCaller(call ControlCall) Caller {
	return func(ctx context.Context, to lnetwire.NID, req, bulk []byte, timeout time.Duration) ([]byte, error) {
		var r ProxyReply
		if err := call(ctx, ProxyOp, ProxyArgs{NID: to.String(), Req: req, Bulk: bulk, Timeout: timeout}, &r); err != nil {
			return nil, err
		}
		return r.Rep, nil
	}
}

// ProxyCall serves ProxyOp: it sends the request from this node and
// returns the reply. Only framework requests are accepted.
func (s *Service) ProxyCall(ctx context.Context, raw json.RawMessage) (*ProxyReply, error) {
	var a ProxyArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("bad %s arguments: %v", ProxyOp, err)
	}
	to, err := lnetwire.ParseNID(a.NID)
	if err != nil {
		return nil, err
	}
	if a.Timeout <= 0 || a.Timeout > 10*time.Minute {
		a.Timeout = 64 * time.Second
	}
	rep, err := s.con.callBytes(ctx, to, a.Req, a.Bulk, a.Timeout)
	if err != nil {
		return nil, err
	}
	return &ProxyReply{Rep: rep}, nil
}

// callBytes is a Caller on this endpoint. A reply with a non-zero status
// is returned, not turned into an error.
func (e *endpoint) callBytes(ctx context.Context, to lnetwire.NID, req, bulk []byte, timeout time.Duration) ([]byte, error) {
	m, _, err := Parse(append([]byte(nil), req...))
	if err != nil {
		return nil, err
	}
	if t := m.Type(); t.IsReply() || t.Service().Portal() != FrameworkPortal {
		return nil, fmt.Errorf("%w: %v cannot be sent for a console", ErrBadType, t)
	}
	m.SetRpyID(e.ids.next())
	var bid uint64
	op := bulkNone
	if bulk != nil {
		if m.Type() != MsgTestReq {
			return nil, fmt.Errorf("%w: bulk with a %v", ErrBadType, m.Type())
		}
		bid, op = e.ids.next(), bulkGet
		m.TestReq().SetBulkID(bid)
	}
	rep, err := e.call(ctx, lnetwire.ProcessID{NID: to, PID: lnetwire.PIDLustre}, m, bid, bulk, op, timeout, make([]byte, MsgSize))
	var se *StatusError
	if err != nil && !errors.As(err, &se) {
		return nil, err
	}
	return append([]byte(nil), rep...), nil
}
