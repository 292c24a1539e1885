package rxe

import "softib/udp"

// linkNetMTU returns the link MTU a device assumes when
// DeviceConfig.NetMTU is 0: that of the interface holding the device's
// address, as rdma_rxe takes its netdev's MTU (rxe_set_mtu; the port's
// active MTU is then the largest IB MTU not above it minus
// RXE_MAX_HDR_LENGTH, so loopback and jumbo links give 4096 and a
// 1500-byte Ethernet link 1024). A Conn that cannot tell (a simulated
// network, a socket on the unspecified address) gives 1500.
func linkNetMTU(c udp.Conn) int {
	if l, ok := c.(interface{ LinkMTU() (int, error) }); ok {
		if m, err := l.LinkMTU(); err == nil {
			return m
		}
	}
	return defaultNetMTU
}
