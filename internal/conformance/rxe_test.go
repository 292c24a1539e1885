package conformance_test

import (
	"testing"

	"softib/internal/conformance"
	"softib/internal/testaddr"
	"softib/rxe"
	"softib/verbs"
)

// TestRxe runs the conformance suite on softib's Soft-RoCE provider: two
// devices on this test binary's loopback addresses. The ibverbs provider
// runs the same suite on the interop guest's kernel rdma_rxe
// (ibverbs.TestConformanceKernel).
func TestRxe(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Pair {
		var p conformance.Pair
		for _, d := range []*verbs.Device{&p.A, &p.B} {
			dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			*d = dev
		}
		return p
	})
}
