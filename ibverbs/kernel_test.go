//go:build ibverbs && linux && cgo

package ibverbs_test

import (
	"os"
	"testing"

	"softib/ibverbs"
	"softib/internal/conformance"
	"softib/verbs"
)

// EnvDevice names the kernel RDMA device TestConformanceKernel runs on.
// The interop test (TestInteropIBVerbs) sets it in the guest, where rxe0
// is Linux's rdma_rxe.
const EnvDevice = "SOFTIB_IBVERBS_DEVICE"

// TestConformanceKernel runs the verbs conformance suite that softib's
// Soft-RoCE passes on a kernel RDMA device through libibverbs: two opens
// of the device, QPs talking to each other through it.
func TestConformanceKernel(t *testing.T) {
	name := os.Getenv(EnvDevice)
	if name == "" {
		t.Skipf("set %s to a kernel RDMA device (TestInteropIBVerbs runs this in the guest)", EnvDevice)
	}
	conformance.Run(t, func(t *testing.T) conformance.Pair {
		var p conformance.Pair
		for _, d := range []*verbs.Device{&p.A, &p.B} {
			dev, err := verbs.Open(verbs.DeviceConfig{Provider: ibverbs.ProviderName, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			*d = dev
		}
		return p
	})
}

// TestDevices lists the kernel's devices; with EnvDevice set, it must be
// among them.
func TestDevices(t *testing.T) {
	devs, err := ibverbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel RDMA devices: %+v", devs)
	if name := os.Getenv(EnvDevice); name != "" {
		for _, d := range devs {
			if d.Name == name {
				return
			}
		}
		t.Fatalf("%s not among %+v", name, devs)
	}
}

// TestPostPollAllocs proves the Go side of posting and polling allocates
// nothing.
func TestPostPollAllocs(t *testing.T) {
	name := os.Getenv(EnvDevice)
	if name == "" {
		t.Skipf("set %s to a kernel RDMA device", EnvDevice)
	}
	dev, err := verbs.Open(verbs.DeviceConfig{Provider: ibverbs.ProviderName, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(verbs.CQAttr{CQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessLocalWrite},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	rwr := []verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 4096)}}}
	wcs := make([]verbs.WC, 16)
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := qp.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		cq.Poll(wcs)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post+poll", allocs)
	}
	// The receive queue (16) fills: drain it to ERR so flushes complete.
	_ = qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
}
