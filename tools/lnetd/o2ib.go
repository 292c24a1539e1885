package lnetd

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/tools/devsel"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// rdmaNI is what an o2ib NI brought up by lnetd owns besides the NI: its
// Soft-RoCE device and the RDMA CM over it. Closed after the NI is gone.
type rdmaNI struct {
	dev verbs.Device
	cm  *rdmacm.Manager
}

// close stops the RDMA CM, then the device.
func (r *rdmaNI) close() {
	if r == nil {
		return
	}
	r.cm.Close()
	devsel.Unobserve(r.dev)
	r.dev.Close()
}

// rxeSeq numbers the devices of this process (rxe_lnetd0, 1, ...).
var rxeSeq atomic.Int64

// openO2IB opens a Soft-RoCE device bound to the NI's address (UDP 4791,
// RoCEv2's port: peers are dialled there) and an RDMA CM over it, and
// returns the o2iblnd configuration for the NI. ni's NID or first
// interface (a name or an IPv4 address) gives the address.
func openO2IB(ni NIConfig, lt Settings, provider string) (o2iblnd.Config, *rdmaNI, error) {
	addr, err := niIPv4(ni)
	if err != nil {
		return o2iblnd.Config{}, nil, err
	}
	if provider == "" {
		provider = os.Getenv(devsel.EnvProvider)
	}
	if provider != "" && provider != "rxe" {
		return openKernelO2IB(provider, addr, lt)
	}
	name := fmt.Sprintf("rxe_lnetd%d", rxeSeq.Add(1)-1)
	// rxe's defaults (UDP GRO on: bulk RDMA is what an LND moves);
	// --pcap captures it (observe.go in tools/devsel).
	dc := verbs.DeviceConfig{Name: name, Addr: addr}
	if err := devsel.CaptureConfig(&dc); err != nil {
		return o2iblnd.Config{}, nil, err
	}
	dev, err := rxe.Open(rxe.Config{DeviceConfig: dc})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return o2iblnd.Config{}, nil, fmt.Errorf("rxe device on %v: %w (UDP %d is taken on this address: another softib node or Linux rdma_rxe? give each node its own address)",
				addr, err, rxe.RoCEv2Port)
		}
		return o2iblnd.Config{}, nil, fmt.Errorf("rxe device on %v: %w", addr, err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(dev); err != nil {
		m.Close()
		dev.Close()
		return o2iblnd.Config{}, nil, fmt.Errorf("RDMA CM on %v: %w", addr, err)
	}
	// softib stat/res and --metrics see the device.
	devsel.Observe(dev) // an rxe device: no error
	c := o2ibConfig(lt)
	c.CM = m
	return c, &rdmaNI{dev: dev, cm: m}, nil
}

// openKernelO2IB opens the kernel RDMA device whose GID table holds addr
// through provider (ibverbs: $SOFTIB_PROVIDER=ibverbs in a build with -tags
// ibverbs), with the kernel's RDMA CM over it.
func openKernelO2IB(provider string, addr netip.Addr, lt Settings) (o2iblnd.Config, *rdmaNI, error) {
	dc := verbs.DeviceConfig{Provider: provider, Addr: addr}
	if err := devsel.CaptureConfig(&dc); err != nil {
		return o2iblnd.Config{}, nil, err
	}
	dev, err := verbs.Open(dc)
	if err != nil {
		return o2iblnd.Config{}, nil, fmt.Errorf("%s device for %v ($%s): %w", provider, addr, devsel.EnvProvider, err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(dev); err != nil {
		m.Close()
		dev.Close()
		return o2iblnd.Config{}, nil, fmt.Errorf("RDMA CM on %s: %w", dev.Name(), err)
	}
	devsel.Observe(dev)
	c := o2ibConfig(lt)
	c.CM = m
	return c, &rdmaNI{dev: dev, cm: m}, nil
}

// o2ibConfig maps the o2ib "lnd tunables" set in the file onto
// o2iblnd.Config (ko2iblnd names). conns_per_peer reaches o2iblnd
// through the NI's lnd.Tunables.ConnsPerPeer (as socklnd's does).
// map_on_demand is obsolete (always on, logged by the caller); the
// device-dependent limits of wrq_sge and ib_mtu are checked when the NI
// starts (o2iblnd refuses them).
func o2ibConfig(lt Settings) o2iblnd.Config {
	var c o2iblnd.Config
	for _, s := range lt {
		v := int(s.Value)
		switch s.Name {
		case "service":
			c.Service = v
		case "peercredits_hiw":
			c.PeerCreditsHiw = v
		case "concurrent_sends":
			c.ConcurrentSends = v
		case "ntx":
			c.NTx = v
		case "fmr_pool_size":
			c.MRCacheSize = v
		case "fmr_flush_trigger":
			c.MRFlushTrigger = v // 0: the default, as in ko2iblnd
		case "fmr_cache":
			c.NoMRCache = v == 0
		case "wrq_sge":
			c.WrqSGE = v
		case "ib_mtu":
			c.IBMTU = v
		case "tos":
			c.TOS = max(v, 0) // -1 and 0: none
		case "retry_count":
			c.RetryCount = v
		case "rnr_retry_count":
			c.RNRRetryCount = v
		case "timeout":
			c.Timeout = time.Duration(v) * time.Second
		case "keepalive":
			c.Keepalive = time.Duration(v) * time.Second
			if v == 0 {
				c.Keepalive = -1 // ko2iblnd: 0 sends no keepalives
			}
		}
	}
	return c
}

// niIPv4 returns the IPv4 address of an o2ib NI: its NID's, else its
// first interface given as an address or named interface with one.
func niIPv4(ni NIConfig) (netip.Addr, error) {
	if ni.NID != "" {
		nid, err := lnetwire.ParseNID(ni.NID)
		if err != nil {
			return netip.Addr{}, err
		}
		a := nid.Addr()
		return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), nil
	}
	for _, name := range ni.Interfaces {
		if a, err := netip.ParseAddr(name); err == nil {
			if !a.Unmap().Is4() {
				return netip.Addr{}, fmt.Errorf("interface address %v: o2ib NIDs are IPv4", a)
			}
			return a.Unmap(), nil
		}
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("interface %q: %w", name, err)
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return netip.Addr{}, fmt.Errorf("interface %q: %w", name, err)
		}
		for _, a := range addrs {
			if pn, ok := a.(*net.IPNet); ok {
				if v4 := pn.IP.To4(); v4 != nil {
					return netip.AddrFrom4([4]byte(v4)), nil
				}
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("no IPv4 address on interfaces %v: give an address (interfaces: {0: 127.0.0.2}) or a nid", ni.Interfaces)
}
