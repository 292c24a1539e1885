// Package vmtest holds what Go tests need to talk to the Linux interop
// guest booted by package interop/vm: a soft-RoCE device opened inside the
// guest's network namespace, and a logger that sends the harness's output
// to the test log. Tests that use it run when SOFTIB_INTEROP_IMAGE names an
// image made by interop/image.sh (scripts/interop.sh sets it).
package vmtest

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"softib/internal/testenv"
	"softib/interop/vm"
	"softib/rxe"
	"softib/verbs"
)

// OpenDevice opens an rxe device bound to addr whose UDP socket lives in
// the named network namespace; the socket stays there and the device is
// used from any goroutine. The device is closed when the test ends.
func OpenDevice(t testing.TB, ns string, addr netip.Addr) verbs.Device {
	t.Helper()
	type res struct {
		d   verbs.Device
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var d verbs.Device
		err := inNetns(ns, func() (err error) {
			d, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}})
			return err
		})
		ch <- res{d, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.d.Close() })
	return r.d
}

// Log is an io.Writer that sends each write to the test log; pass it as
// vm.Config.Log.
type Log struct{ T testing.TB }

func (w Log) Write(p []byte) (int, error) {
	w.T.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Boot boots the interop guest for a test, or returns a nil VM (the test
// then returns) when SOFTIB_INTEROP_IMAGE is unset or -short is given, so
// that the unit-test run passes over it; scripts/interop.sh sets it, and
// without root or qemu the test fails in CI. what names the test in the
// log; nsPrefix makes the namespace name (with the pid). The VM is
// stopped and the context (bounded by timeout) cancelled when the test
// ends.
func Boot(t testing.TB, what, nsPrefix string, timeout time.Duration) (context.Context, *vm.VM) {
	t.Helper()
	img := os.Getenv("SOFTIB_INTEROP_IMAGE")
	if img == "" || testing.Short() {
		t.Logf("SOFTIB_INTEROP_IMAGE not set: %s not run", what)
		return nil, nil
	}
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "qemu-system-x86_64")
	testenv.RequireTool(t, "ip")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	v, err := vm.Start(ctx, vm.Config{Image: img, Namespace: fmt.Sprintf("%s-%d", nsPrefix, os.Getpid()), Log: Log{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	return ctx, v
}
