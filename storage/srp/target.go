// Package srp is an SRP (SCSI RDMA Protocol) target on softib. It logs
// initiators in over the RDMA CM (Linux's ib_srp with dest=IP:port, the
// way SRP runs on RoCE: struct srp_login_req_rdma as the REQ's private
// data, SRP_LOGIN_RSP in the REP's, SRP_LOGIN_REJ in the REJ's) and
// over the IB CM with the target's service ID (SRP_LOGIN_REQ in the
// REQ's private data, as ib_srp without dest= sends it; see
// [Target.ListenIBCM]); both logins lead to the same channel code. It
// grants request-limit credits, runs SRP_CMD with direct and indirect
// (in the IU or external) descriptor tables, moves data by RDMA
// READ/WRITE through rdma_rw contexts (package rdmarw), answers with
// SRP_RSP, and handles SRP_TSK_MGMT and SRP_I_LOGOUT. Commands run on
// the SCSI target core (package storage/scsi). A device-management
// (DM) MAD agent on the device's QP1 answers the IOUnitInfo,
// IOControllerProfile and ServiceEntries queries srp_daemon/ibsrpdm
// make (dm.go, dmagent.go).
package srp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"softib/cm"
	"softib/rdmacm"
	"softib/storage/internal/rdmatarget"
	"softib/storage/scsi"
	"softib/wire/mad"
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
	// IOCGUID and IDExt make the target port identifier a login must
	// name (id_ext, then ioc_guid, as ib_srp's add_target takes them);
	// IOCGUID is also the IB CM service ID and the I/O controller GUID
	// the DM agent reports (ib_srpt uses one srpt_service_guid for all
	// three). 0 means [DefaultGUID] of the listen address.
	IOCGUID, IDExt uint64
	// Logf, if set, receives channel events.
	Logf func(format string, args ...any)
}

// DefaultGUID is the GUID softib's CM derives from the port GID of a
// (cm.Config.CAGUID's default): the analogue of the node GUID that
// ib_srpt takes for its ioc_guid, id_ext and service ID.
func DefaultGUID(a netip.Addr) uint64 {
	g := mad.GIDFromIP(a)
	return binary.BigEndian.Uint64(g[8:]) | 0x0200000000000000
}

// Counters are a target's protocol counters.
type Counters struct {
	Logins, LoginRejects, Logouts, Commands, TMFs, BadIUs atomic.Uint64
	// DMGets counts the DM agent's answered Gets, DMErrors its answers
	// with a non-zero MAD status.
	DMGets, DMErrors atomic.Uint64
}

// Target is an SRP target.
type Target struct {
	cfg  Config
	m    *rdmacm.Manager
	scsi *scsi.Target
	l    rdmatarget.Listener
	// Stats counts protocol events.
	Stats Counters

	mu  sync.Mutex
	dms []*cm.GSI // where the DM agent is registered
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
	if cfg.IOCGUID == 0 {
		cfg.IOCGUID = DefaultGUID(cfg.Addr.Addr())
	}
	if cfg.IDExt == 0 {
		cfg.IDExt = DefaultGUID(cfg.Addr.Addr())
	}
	t := &Target{cfg: cfg, m: m, scsi: st}
	t.l = rdmatarget.Listener{Prefix: "srp", Kind: "channel", Logf: cfg.Logf, SCSI: st}
	return t, nil
}

// Addr returns the listen address.
func (t *Target) Addr() netip.AddrPort { return t.cfg.Addr }

// IOCGUID returns the I/O controller GUID (ioc_guid), which is also
// the IB CM service ID.
func (t *Target) IOCGUID() uint64 { return t.cfg.IOCGUID }

// IDExt returns the identifier extension (id_ext).
func (t *Target) IDExt() uint64 { return t.cfg.IDExt }

// ServiceID returns the IB CM service ID the target listens on.
func (t *Target) ServiceID() uint64 { return t.cfg.IOCGUID }

// TargetPortID returns the 16-byte SRP target port identifier: id_ext
// then ioc_guid, big-endian.
func (t *Target) TargetPortID() [16]byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], t.cfg.IDExt)
	binary.BigEndian.PutUint64(b[8:], t.cfg.IOCGUID)
	return b
}

// Listen starts the RDMA CM listener.
func (t *Target) Listen() error { return t.l.Listen(t.m, t.cfg.Addr) }

// ListenIBCM makes the target take logins over the IB CM of one
// device (c, attached to the device's QP1: a cm.Config.Attached
// callback hands it over for an rdmacm.Manager's devices) with its
// service ID, and registers the DM agent on the device's GSI. ib_srpt
// does the same on InfiniBand ports only; Linux's ib_srp cannot use it
// on RoCE (its IB CM login needs an SA path record: see the README).
func (t *Target) ListenIBCM(c *cm.CM) error {
	g, ok := c.Port().(*cm.GSI)
	if !ok {
		return errors.New("srp: IB CM without a GSI agent")
	}
	if err := t.registerDM(g); err != nil {
		return err
	}
	if err := t.l.ListenIBCM(c, t.ServiceID(), t.loginIBCM); err != nil {
		t.unregisterDM(g)
		return err
	}
	return nil
}

// Serve handles logins and channel events until ctx ends or Close.
func (t *Target) Serve(ctx context.Context) error { return t.l.Serve(ctx, t.loginRDMACM) }

// Close stops the listeners and the DM agent and tears every channel
// down.
func (t *Target) Close() error {
	t.mu.Lock()
	dms := t.dms
	t.dms = nil
	t.mu.Unlock()
	for _, g := range dms {
		t.unregisterDM(g)
	}
	t.l.Close()
	return nil
}
