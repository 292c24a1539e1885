package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/testenv"
	"softib/internal/tsharktest"
	"softib/interop/vm"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/mad"
)

// openInNetns opens an rxe device whose UDP socket lives in the named
// network namespace. The socket stays there; the device is used from any
// goroutine afterwards.
func openInNetns(t *testing.T, ns string, addr netip.Addr) verbs.Device {
	t.Helper()
	type res struct {
		d   verbs.Device
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine if restoring fails
		orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}})
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{d, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.d.Close() })
	return r.d
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// TestInteropLinuxKernel connects softib's RDMA CM with the Linux 6.1
// kernel rdma_cm (rdma_rxe in a QEMU guest, rdmacm-utils' rdma_server
// and rdma_client) in both directions and checks the capture with
// tshark. It runs when SOFTIB_INTEROP_IMAGE names an image made by
// interop/image.sh (it boots a VM: minutes under TCG).
func TestInteropLinuxKernel(t *testing.T) {
	img := os.Getenv("SOFTIB_INTEROP_IMAGE")
	if img == "" || testing.Short() {
		t.Log("SOFTIB_INTEROP_IMAGE not set: kernel interop not run")
		return
	}
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "qemu-system-x86_64")
	testenv.RequireTool(t, "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	v, err := vm.Start(ctx, vm.Config{Image: img, Namespace: fmt.Sprintf("sibcm-%d", os.Getpid()), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	pcapPath := filepath.Join(t.TempDir(), "cm-interop.pcap")
	if p := os.Getenv("SOFTIB_INTEROP_PCAP"); p != "" {
		pcapPath = p
	}
	capt, err := v.Capture(ctx, pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	dev := openInNetns(t, v.Namespace(), host)
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}

	t.Run("kernel server", func(t *testing.T) {
		job, err := v.Go("rdma_server", fmt.Sprintf("rdma_server -s %s -p 7471", guest), 120*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ch := rdmacm.NewEventChannel()
		var id *rdmacm.ID
		var cq verbs.CQ
		var qp verbs.QP
		var mr verbs.MR
		// rdma_cm listens without a TCP socket: retry while the kernel
		// CM still rejects with "invalid service ID".
		for try := 0; ; try++ {
			id, err = m.CreateID(ch, nil, rdmacm.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			if err := id.ResolveAddr(netip.AddrPortFrom(host, 0), netip.AddrPortFrom(guest, 7471), time.Second); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, rdmacm.EventAddrResolved)
			if err := id.ResolveRoute(time.Second); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, rdmacm.EventRouteResolved)
			cq = newCQ(t, id)
			if qp, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: qpCap}); err != nil {
				t.Fatal(err)
			}
			if mr, err = id.PD().RegMR(make([]byte, 32), verbs.AccessLocalWrite); err != nil {
				t.Fatal(err)
			}
			if _, err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(16, 16)}}}); err != nil {
				t.Fatal(err)
			}
			if err := id.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			ev, err := ch.GetEvent(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == rdmacm.EventEstablished {
				break
			}
			if ev.Type != rdmacm.EventRejected || ev.Status != int(mad.RejInvalidServiceID) || try > 100 || job.Done() {
				r, _ := job.Wait(ctx)
				t.Fatalf("connect: %v status %d (%v); guest: %s %s", ev.Type, ev.Status, ev.Err, r.Stdout, r.Stderr)
			}
			id.DestroyQP()
			id.Destroy()
			time.Sleep(300 * time.Millisecond)
		}
		copy(mr.Buf(), "softib to linux!")
		if _, err := qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 16)}}}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("wc %+v", wc)
			}
		}
		expect(t, ch, rdmacm.EventDisconnected)
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		r, err := job.Wait(ctx)
		if err != nil || r.Code != 0 {
			t.Fatalf("rdma_server: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
		}
		t.Logf("rdma_server: %s", r.Stdout)
		id.DestroyQP()
		id.Destroy()
	})

	t.Run("kernel client", func(t *testing.T) {
		ch := rdmacm.NewEventChannel()
		lis, err := m.CreateID(ch, nil, rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Destroy()
		if err := lis.BindAddr(netip.AddrPortFrom(host, 7471)); err != nil {
			t.Fatal(err)
		}
		if err := lis.Listen(0); err != nil {
			t.Fatal(err)
		}
		job, err := v.Go("rdma_client", fmt.Sprintf("rdma_client -s %s -p 7471", host), 120*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ectx, ecancel := context.WithTimeout(ctx, 3*time.Minute)
		defer ecancel()
		req, err := ch.GetEvent(ectx)
		if err != nil || req.Type != rdmacm.EventConnectRequest {
			r, _ := job.Wait(ctx)
			t.Fatalf("no CONNECT_REQUEST (%v %v); guest: %s %s", req, err, r.Stdout, r.Stderr)
		}
		id := req.ID
		t.Logf("CONNECT_REQUEST from %v: %+v", id.RemoteAddr(), req.Conn)
		cq := newCQ(t, id)
		qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: qpCap})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := id.PD().RegMR(make([]byte, 32), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(16, 16)}}}); err != nil {
			t.Fatal(err)
		}
		if err := id.Accept(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, rdmacm.EventEstablished)
		if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv {
			t.Fatalf("recv %+v", wc)
		}
		copy(mr.Buf(), "linux, hi back!!")
		if _, err := qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 16)}}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("send %+v", wc)
		}
		expect(t, ch, rdmacm.EventDisconnected)
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		r, err := job.Wait(ctx)
		if err != nil || r.Code != 0 {
			t.Fatalf("rdma_client: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
		}
		t.Logf("rdma_client: %s", r.Stdout)
		id.DestroyQP()
		id.Destroy()
	})

	capt.Stop()
	tsharktest.CheckNoMalformed(t, pcapPath)
	rows := tsharktest.Fields(t, pcapPath, []string{"ip.src", "infiniband.mad.attributeid", "infiniband.cm.rej.reason"},
		"-Y", "infiniband.mad.mgmtclass == 0x07")
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r[0]+" "+r[1]] = true
	}
	t.Logf("CM MADs in capture: %d", len(rows))
	for _, want := range []string{
		host.String() + " 0x0010", guest.String() + " 0x0013", host.String() + " 0x0014", // we connect
		guest.String() + " 0x0010", host.String() + " 0x0013", guest.String() + " 0x0014", // they connect
		guest.String() + " 0x0015", host.String() + " 0x0016", // they disconnect, we answer
	} {
		if !seen[want] {
			t.Errorf("capture lacks %s (have %v)", want, seen)
		}
	}
	_ = errors.New
}
