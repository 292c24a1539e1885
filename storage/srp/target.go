// Package srp is an SRP (SCSI RDMA Protocol) target on softib: it logs
// initiators in over the RDMA CM (Linux's ib_srp with dest=IP:port, the
// way SRP runs on RoCE: struct srp_login_req_rdma as the REQ's private
// data, SRP_LOGIN_RSP in the REP's, SRP_LOGIN_REJ in the REJ's), grants
// request-limit credits, runs SRP_CMD with direct and indirect (in the
// IU or external) descriptor tables, moves data by RDMA READ/WRITE
// through rdma_rw contexts (package rdmarw), answers with SRP_RSP, and
// handles SRP_TSK_MGMT and SRP_I_LOGOUT. Commands run on the SCSI target
// core (package storage/scsi). Login over the IB CM with a service ID
// and the device-management MAD agent are not implemented.
package srp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"softib/rdmacm"
	"softib/storage/internal/rdmatarget"
	"softib/storage/scsi"
)

// DefaultPort is the RDMA CM port the target listens on by default.
const DefaultPort = 5555

// Config configures a target.
type Config struct {
	// Addr is the RDMA CM listen address (port 0 = DefaultPort).
	Addr netip.AddrPort
	// Credits is the request limit a channel grants (its receive queue
	// and concurrent commands; 2..256, 0 = 64).
	Credits int
	// Logf, if set, receives channel events.
	Logf func(format string, args ...any)
}

// Counters are a target's protocol counters.
type Counters struct {
	Logins, LoginRejects, Logouts, Commands, TMFs, BadIUs atomic.Uint64
}

// Target is an SRP target.
type Target struct {
	cfg  Config
	m    *rdmacm.Manager
	scsi *scsi.Target
	l    rdmatarget.Listener
	// Stats counts protocol events.
	Stats Counters
}

// NewTarget returns a target serving st's LUNs through m's devices.
func NewTarget(cfg Config, m *rdmacm.Manager, st *scsi.Target) (*Target, error) {
	if !cfg.Addr.Addr().IsValid() {
		return nil, errors.New("srp: a listen address is needed")
	}
	if cfg.Addr.Port() == 0 {
		cfg.Addr = netip.AddrPortFrom(cfg.Addr.Addr(), DefaultPort)
	}
	switch {
	case cfg.Credits == 0:
		cfg.Credits = 64
	case cfg.Credits < 2 || cfg.Credits > 256:
		return nil, fmt.Errorf("srp: credits %d (2..256)", cfg.Credits)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	t := &Target{cfg: cfg, m: m, scsi: st}
	t.l = rdmatarget.Listener{Prefix: "srp", Kind: "channel", Logf: cfg.Logf, SCSI: st}
	return t, nil
}

// Addr returns the listen address.
func (t *Target) Addr() netip.AddrPort { return t.cfg.Addr }

// Listen starts the RDMA CM listener.
func (t *Target) Listen() error { return t.l.Listen(t.m, t.cfg.Addr) }

// Serve handles logins and channel events until ctx ends or Close.
func (t *Target) Serve(ctx context.Context) error { return t.l.Serve(ctx, t.login) }

// Close stops the listener and tears every channel down.
func (t *Target) Close() error {
	t.l.Close()
	return nil
}
