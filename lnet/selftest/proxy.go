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
	NID     string        `json:"nid"`
	Req     []byte        `json:"req"` // an encoded framework request
	Timeout time.Duration `json:"timeout"`
}

// ProxyReply is the encoded reply.
type ProxyReply struct {
	Rep []byte `json:"rep"`
}

// Caller sends one encoded console request to a node and returns the
// encoded reply (which may carry a non-zero status).
type Caller func(ctx context.Context, to lnetwire.NID, req []byte, timeout time.Duration) ([]byte, error)

// ControlCall is how a console reaches an lnetd control socket: the
// lnetd client's Call method.
type ControlCall func(ctx context.Context, op string, args, result any) error

// ProxyCaller turns a control-socket call function into a Caller.
func ProxyCaller(call ControlCall) Caller {
	return func(ctx context.Context, to lnetwire.NID, req []byte, timeout time.Duration) ([]byte, error) {
		var r ProxyReply
		if err := call(ctx, ProxyOp, ProxyArgs{NID: to.String(), Req: req, Timeout: timeout}, &r); err != nil {
			return nil, err
		}
		return r.Rep, nil
	}
}

// ProxyCall serves ProxyOp: it sends the request from this node and
// returns the reply. Only framework requests (no bulk) are accepted.
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
		a.Timeout = 10 * time.Second
	}
	rep, err := s.ep.callBytes(ctx, to, a.Req, a.Timeout)
	if err != nil {
		return nil, err
	}
	return &ProxyReply{Rep: rep}, nil
}

// callBytes is a Caller on this endpoint. A reply with a non-zero status
// is returned, not turned into an error.
func (e *endpoint) callBytes(ctx context.Context, to lnetwire.NID, req []byte, timeout time.Duration) ([]byte, error) {
	var m Msg
	if err := ParseMsg(req, &m); err != nil {
		return nil, err
	}
	if m.Type.IsReply() || m.Type.Service().Portal() != FrameworkPortal {
		return nil, fmt.Errorf("%w: %v cannot be sent for a console", ErrBadType, m.Type)
	}
	m.RpyID, _ = e.newIDs()
	var rep Msg
	err := e.call(ctx, lnetwire.ProcessID{NID: to, PID: lnetwire.PIDLustre}, &m, nil, 0, timeout, &rep, make([]byte, 1024))
	var se *StatusError
	if err != nil && !errors.As(err, &se) {
		return nil, err
	}
	return rep.Append(nil), nil
}
