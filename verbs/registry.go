package verbs

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// The devices opened through Open, and the clients told about them (the
// kernel's ib_register_client / ib_unregister_client with their add and
// remove callbacks, ib_device_get_by_name, ib_device_get_by_netdev).
// Providers call Retire from their Close.

// Client is told about devices as they are opened and closed.
type Client struct {
	// Add is called for every open device when the client registers,
	// and for each device Open opens afterwards.
	Add func(Device)
	// Remove is called when a device closes (its provider's Close calls
	// Retire), and for every open device when the client unregisters.
	Remove func(Device)
}

var (
	regMu   sync.Mutex
	devices []Device
	clients = map[*Client]struct{}{}
)

// RegisterClient registers c and calls c.Add for every open device.
// The returned function unregisters it, calling c.Remove for each.
func RegisterClient(c *Client) (unregister func()) {
	regMu.Lock()
	clients[c] = struct{}{}
	devs := append([]Device(nil), devices...)
	regMu.Unlock()
	for _, d := range devs {
		if c.Add != nil {
			c.Add(d)
		}
	}
	return func() {
		regMu.Lock()
		_, ok := clients[c]
		delete(clients, c)
		devs := append([]Device(nil), devices...)
		regMu.Unlock()
		if ok && c.Remove != nil {
			for _, d := range devs {
				c.Remove(d)
			}
		}
	}
}

// announce records a device Open opened and tells the clients.
func announce(d Device) {
	regMu.Lock()
	devices = append(devices, d)
	cs := clientList()
	regMu.Unlock()
	for _, c := range cs {
		if c.Add != nil {
			c.Add(d)
		}
	}
}

// Retire is called by a provider when d closes: d leaves the registry
// and the clients' Remove callbacks run. Devices not opened through
// Open are ignored.
func Retire(d Device) {
	regMu.Lock()
	i := -1
	for k, x := range devices {
		if x == d {
			i = k
		}
	}
	if i < 0 {
		regMu.Unlock()
		return
	}
	devices = append(devices[:i], devices[i+1:]...)
	cs := clientList()
	regMu.Unlock()
	for _, c := range cs {
		if c.Remove != nil {
			c.Remove(d)
		}
	}
}

func clientList() []*Client {
	cs := make([]*Client, 0, len(clients))
	for c := range clients {
		cs = append(cs, c)
	}
	return cs
}

// Devices returns the devices opened through Open and not yet closed.
func Devices() []Device {
	regMu.Lock()
	defer regMu.Unlock()
	return append([]Device(nil), devices...)
}

// DeviceByName returns the open device called name
// (ib_device_get_by_name).
func DeviceByName(name string) (Device, error) {
	for _, d := range Devices() {
		if d.Name() == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("verbs: device %q: %w", name, ErrNotFound)
}

// DeviceByNetdev returns the open device whose address (a GID of port
// 1) belongs to the network interface ifname (ib_device_get_by_netdev:
// a RoCE device is tied to its netdev by its GIDs).
func DeviceByNetdev(ifname string) (Device, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("verbs: netdev %q: %w", ifname, err)
	}
	as, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("verbs: netdev %q: %w", ifname, err)
	}
	for _, d := range Devices() {
		tbl, err := d.GIDTable(1)
		if err != nil {
			continue
		}
		for _, e := range tbl {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == e.GID.Addr() {
						return d, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("verbs: no open device on netdev %q: %w", ifname, ErrNotFound)
}

// Unregister removes a provider registered under name (the kernel's
// ib_unregister_driver); devices it opened stay open. It reports
// whether the name was registered.
func Unregister(name string) bool {
	providersMu.Lock()
	defer providersMu.Unlock()
	if _, ok := providers[name]; !ok {
		return false
	}
	delete(providers, name)
	if firstName == name {
		firstName = "" // Open's default becomes the first by name
		for n := range providers {
			if firstName == "" || n < firstName {
				firstName = n
			}
		}
	}
	return true
}
