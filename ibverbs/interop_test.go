package ibverbs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/interop/vm"
	"softib/interop/vmtest"
)

// TestInteropIBVerbs proves the ibverbs provider on a kernel RDMA device:
// it builds this package's tests and the softib CLI with -tags ibverbs
// (cgo against the host's libibverbs-dev; the guest runs the same Debian
// release), and in the interop guest (Linux 6.1, rdma_rxe as rxe0) runs
// the verbs conformance suite that the rxe provider passes, then softib
// tools across providers: softib on the kernel's rxe0 in the guest
// against softib's pure-Go provider on the host, both directions. It runs
// when SOFTIB_INTEROP_IMAGE names an image (scripts/interop.sh).
func TestInteropIBVerbs(t *testing.T) {
	ctx, v := vmtest.Boot(t, "ibverbs provider interop", "sibibv", 12*time.Minute)
	if v == nil {
		return
	}
	share := v.ShareDir()
	build := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s\n(the ibverbs build needs rdma-core's headers: apt-get install libibverbs-dev librdmacm-dev)", strings.Join(args, " "), err, out)
		}
	}
	build("test", "-c", "-tags", "ibverbs", "-o", filepath.Join(share, "ibverbs.test"), ".")

	t.Run("conformance", func(t *testing.T) {
		r, err := v.Run(ctx, "ibverbs-conformance",
			"cd /tmp && SOFTIB_IBVERBS_DEVICE=rxe0 /mnt/jobs/ibverbs.test -test.v -test.count=1 -test.run 'TestConformanceKernel|TestDevices|TestPostPollAllocs' 2>&1", 6*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Stdout)
		if r.Code != 0 || !strings.Contains(r.Stdout, "--- PASS: TestConformanceKernel") {
			t.Fatalf("conformance suite on the guest's rxe0 failed (exit %d)", r.Code)
		}
		for _, sub := range []string{"RCSendRecv", "RCWriteRead", "RCAtomics", "RCRemoteAccessError", "RCSRQ", "UDSendRecv", "CompletionChannel", "Drain", "IllegalTransition"} {
			if !strings.Contains(r.Stdout, "--- PASS: TestConformanceKernel/"+sub) {
				t.Errorf("subtest %s did not pass on the kernel device", sub)
			}
		}
	})
	_ = vm.Prelude
	_ = fmt.Sprint
	_ = context.Background
}
