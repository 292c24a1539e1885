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
	"sync"
	"sync/atomic"

	"softib/rdmacm"
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
	cfg   Config
	m     *rdmacm.Manager
	scsi  *scsi.Target
	ch    *rdmacm.EventChannel
	lis   *rdmacm.ID
	mu    sync.Mutex
	chans map[*channel]struct{}
	wg    sync.WaitGroup
	// served is closed when Serve returns (nil before Serve runs).
	served chan struct{}
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
	return &Target{cfg: cfg, m: m, scsi: st, chans: map[*channel]struct{}{}}, nil
}

// Addr returns the listen address.
func (t *Target) Addr() netip.AddrPort { return t.cfg.Addr }

// Listen starts the RDMA CM listener.
func (t *Target) Listen() error {
	t.ch = rdmacm.NewEventChannel()
	lis, err := t.m.CreateID(t.ch, nil, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	if err := lis.BindAddr(t.cfg.Addr); err != nil {
		lis.Destroy()
		return fmt.Errorf("srp: bind %v: %w", t.cfg.Addr, err)
	}
	if err := lis.Listen(64); err != nil {
		lis.Destroy()
		return err
	}
	t.lis = lis
	return nil
}

// Serve handles logins and channel events until ctx ends or Close.
func (t *Target) Serve(ctx context.Context) error {
	served := make(chan struct{})
	t.mu.Lock()
	t.served = served
	t.mu.Unlock()
	defer close(served)
	for {
		ev, err := t.ch.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, rdmacm.ErrClosed) {
				return nil
			}
			return err
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			t.login(ev)
		case rdmacm.EventEstablished:
			if c, ok := ev.ID.Context().(*channel); ok {
				t.cfg.Logf("srp: channel from %v established", c.id.RemoteAddr())
			}
		case rdmacm.EventDisconnected, rdmacm.EventTimewaitExit, rdmacm.EventDeviceRemoval,
			rdmacm.EventConnectError, rdmacm.EventUnreachable, rdmacm.EventRejected:
			if c, ok := ev.ID.Context().(*channel); ok {
				c.shutdown(fmt.Sprintf("RDMA CM %v", ev.Type))
			}
		}
	}
}

// Close stops the listener and tears every channel down.
func (t *Target) Close() error {
	if t.lis != nil {
		t.lis.Destroy()
	}
	// Serve must be gone before the teardown: it starts connection
	// teardowns (WaitGroup.Add) that the Wait below must not race.
	if t.ch != nil {
		t.ch.Close()
	}
	t.mu.Lock()
	served := t.served
	t.mu.Unlock()
	if served != nil {
		<-served
	}
	t.mu.Lock()
	chans := make([]*channel, 0, len(t.chans))
	for c := range t.chans {
		chans = append(chans, c)
	}
	t.mu.Unlock()
	for _, c := range chans {
		c.shutdown("target closed")
	}
	t.wg.Wait()
	return nil
}
