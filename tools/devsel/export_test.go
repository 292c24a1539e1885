package devsel

import "net/netip"

// SetDefaultAddr makes a the default address until the test ends.
func SetDefaultAddr(a netip.Addr) (restore func()) {
	old := defaultAddr
	defaultAddr = func() netip.Addr { return a }
	return func() { defaultAddr = old }
}
