// Package iser is an iSCSI target over RDMA (iSER, RFC 7145) on softib:
// it listens with the RDMA CM (port 3260 by default), takes the iSER CM
// private data Linux's ib_iser sends, runs the iSCSI login phase (text
// negotiation of the keys open-iscsi sends for iSER, among them
// RDMAExtensions, InitiatorRecvDataSegmentLength and
// TargetRecvDataSegmentLength) and the full feature phase: SCSI commands
// whose data moves by RDMA READ (data-out, beyond immediate data) and
// RDMA WRITE (data-in) through rdma_rw contexts (package rdmarw),
// responses, NOP-Out/NOP-In, task management and logout. SendTargets
// discovery is served over plain iSCSI/TCP, as Linux's iscsiadm does it.
// Commands run on a SCSI target core (package storage/scsi).
package iser

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"softib/rdmacm"
	"softib/storage/internal/rdmatarget"
	"softib/storage/scsi"
)

// DefaultPort is the iSCSI port (IANA 3260), used by iSER too.
const DefaultPort = 3260

// Config configures a target.
type Config struct {
	// IQN is the target's iSCSI name.
	IQN string
	// Addr is where the RDMA CM listens (port 0 = 3260); its address must
	// belong to a device of the manager.
	Addr netip.AddrPort
	// DiscoveryAddr is where SendTargets discovery over TCP listens; the
	// zero value means Addr's address and port; an invalid address (use
	// NoDiscovery) turns discovery off.
	DiscoveryAddr netip.AddrPort
	// NoDiscovery turns the TCP discovery listener off.
	NoDiscovery bool
	// Window is how many commands one connection runs at once (the
	// CmdSN window, 1..256; 0 = 32). Each costs a 512 KiB data buffer.
	Window int
	// Logf, if set, receives connection events.
	Logf func(format string, args ...any)
}

// Counters are a target's protocol counters.
type Counters struct {
	Connections, Logins, Logouts, LoginFailures, Commands atomic.Uint64
	NOPs, TMFs, Rejects, ProtocolErrors, Discoveries      atomic.Uint64
}

// Target is an iSER target.
type Target struct {
	cfg  Config
	m    *rdmacm.Manager
	scsi *scsi.Target
	l    rdmatarget.Listener
	tcp  net.Listener
	tsih atomic.Uint32
	// wg tracks the discovery connections.
	wg sync.WaitGroup
	// Stats counts protocol events.
	Stats Counters
}

// NewTarget returns a target serving the LUNs of st through m's devices.
func NewTarget(cfg Config, m *rdmacm.Manager, st *scsi.Target) (*Target, error) {
	if cfg.IQN == "" {
		return nil, errors.New("iser: an IQN is needed")
	}
	if !cfg.Addr.Addr().IsValid() {
		return nil, errors.New("iser: a listen address is needed")
	}
	if cfg.Addr.Port() == 0 {
		cfg.Addr = netip.AddrPortFrom(cfg.Addr.Addr(), DefaultPort)
	}
	if cfg.DiscoveryAddr == (netip.AddrPort{}) {
		cfg.DiscoveryAddr = cfg.Addr
	}
	switch {
	case cfg.Window == 0:
		cfg.Window = 32
	case cfg.Window < 1 || cfg.Window > 256:
		return nil, fmt.Errorf("iser: window %d (1..256)", cfg.Window)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	t := &Target{cfg: cfg, m: m, scsi: st}
	t.l = rdmatarget.Listener{Prefix: "iser", Kind: "connection", Logf: cfg.Logf, SCSI: st}
	return t, nil
}

func (t *Target) nextTSIH() uint16 {
	for {
		if v := uint16(t.tsih.Add(1)); v != 0 {
			return v
		}
	}
}

// portal is the TargetAddress the target reports in SendTargets.
func (t *Target) portal() string { return t.cfg.Addr.String() }

// Addr returns the RDMA CM listen address.
func (t *Target) Addr() netip.AddrPort { return t.cfg.Addr }

// DiscoveryAddr returns the TCP discovery listener's address (after
// Listen, with the port the system picked for port 0), or the zero value
// without discovery.
func (t *Target) DiscoveryAddr() netip.AddrPort {
	if t.tcp == nil {
		return netip.AddrPort{}
	}
	return t.tcp.Addr().(*net.TCPAddr).AddrPort()
}

// Listen starts the RDMA CM listener and the discovery listener.
func (t *Target) Listen() error {
	if err := t.l.Listen(t.m, t.cfg.Addr); err != nil {
		return err
	}
	if !t.cfg.NoDiscovery {
		l, err := net.Listen("tcp", t.cfg.DiscoveryAddr.String())
		if err != nil {
			t.l.Close()
			return fmt.Errorf("iser: discovery listener: %w", err)
		}
		t.tcp = l
	}
	return nil
}

// Serve handles connections until ctx ends or Close; it returns nil
// then.
func (t *Target) Serve(ctx context.Context) error {
	if t.tcp != nil {
		return t.l.Serve(ctx, t.accept, t.serveTCP)
	}
	return t.l.Serve(ctx, t.accept)
}

// Close stops the listeners and tears every connection down.
func (t *Target) Close() error {
	if t.tcp != nil {
		t.tcp.Close()
	}
	// The listener's Close waits for serveTCP, so no discovery
	// connection starts after it.
	t.l.Close()
	t.wg.Wait()
	return nil
}
