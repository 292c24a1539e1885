package verbs_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"softib/verbs"
)

// regDev is a device of the registry test's provider.
type regDev struct {
	verbs.Device
	name string
	gid  verbs.GID
}

func (d *regDev) Name() string { return d.name }
func (d *regDev) GIDTable(uint8) ([]verbs.GIDEntry, error) {
	return []verbs.GIDEntry{{Index: 1, GID: d.gid, Type: verbs.GIDTypeRoCEv2}}, nil
}
func (d *regDev) Close() error { verbs.Retire(d); return nil }

type regProvider struct{}

func (regProvider) Open(cfg verbs.DeviceConfig) (verbs.Device, error) {
	return &regDev{name: cfg.Name, gid: verbs.GIDFromAddr(cfg.Addr)}, nil
}

// TestRegistry: clients hear of devices opened and closed (and of those
// open when they register), lookup by name and by netdev, provider
// unregistration.
func TestRegistry(t *testing.T) {
	verbs.Register("regtest", regProvider{})
	defer verbs.Unregister("regtest")
	open := func(name string) verbs.Device {
		d, err := verbs.Open(verbs.DeviceConfig{Provider: "regtest", Name: name, Addr: netip.MustParseAddr("127.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d1 := open("reg1")
	var added, removed []string
	unreg := verbs.RegisterClient(&verbs.Client{
		Add:    func(d verbs.Device) { added = append(added, d.Name()) },
		Remove: func(d verbs.Device) { removed = append(removed, d.Name()) },
	})
	d2 := open("reg2")
	if !slices.Equal(added, []string{"reg1", "reg2"}) {
		t.Errorf("added %v", added)
	}
	if d, err := verbs.DeviceByName("reg2"); err != nil || d != d2 {
		t.Errorf("DeviceByName: %v %v", d, err)
	}
	if _, err := verbs.DeviceByName("nope"); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("DeviceByName(nope): %v", err)
	}
	if d, err := verbs.DeviceByNetdev("lo"); err != nil || (d != d1 && d != d2) {
		t.Errorf("DeviceByNetdev(lo): %v %v", d, err)
	}
	d1.Close()
	if !slices.Equal(removed, []string{"reg1"}) || slices.Contains(verbs.Devices(), d1) {
		t.Errorf("removed %v after closing reg1", removed)
	}
	unreg()
	if !slices.Equal(removed, []string{"reg1", "reg2"}) {
		t.Errorf("removed %v after unregistering", removed)
	}
	d2.Close()
	if len(removed) != 2 {
		t.Errorf("an unregistered client heard of a close: %v", removed)
	}
	if !verbs.Unregister("regtest") || verbs.Unregister("regtest") {
		t.Error("Unregister: want true once, then false")
	}
	if _, err := verbs.Open(verbs.DeviceConfig{Provider: "regtest"}); !errors.Is(err, verbs.ErrNoProvider) {
		t.Errorf("Open of an unregistered provider: %v", err)
	}
}
