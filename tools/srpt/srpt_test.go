package srpt

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/testenv"
)

// TestUsage checks the command's own flags and names; the checks all
// target commands share are targetcmd's.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if code := Run(context.Background(), nil, &out); code != 2 {
		t.Fatalf("code %d, want 2", code)
	}
	for _, want := range []string{"usage: softib srpt", "[--port 5555]", "-credits", "log channels"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage %q lacks %q", out.String(), want)
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"--addr", "127.0.0.1", "--lun", "file:/nonexistent/x"}, &out); code != 1 || !strings.Contains(out.String(), "srpt: ") {
		t.Errorf("missing LUN file: code %d, output %q", code, out.String())
	}
}

// TestRunBanner runs the target on a softib device until its context
// ends: it listens on both CMs and prints the add_target lines with the
// given GUIDs.
func TestRunBanner(t *testing.T) {
	addr := testaddr.Next()
	var out testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"--addr", addr.String(), "--lun", "mem:1M", "--ioc-guid", "0x0002c90300000007", "--id-ext", "11"}, &out)
	}()
	deadline := time.Now().Add(30 * time.Second) // hang guard
	for !strings.Contains(out.String(), "service_id=") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("code %d: %s", code, out.String())
	}
	gid := addr.As16()
	for _, want := range []string{
		"IB CM service ID 0002c90300000007 (DM agent on QP1)",
		fmt.Sprintf("echo id_ext=0000000000000011,ioc_guid=0002c90300000007,dest=%s:5555 > /sys/class/infiniband_srp/srp-rxe0-1/add_target", addr),
		fmt.Sprintf("dgid=%x,pkey=ffff,service_id=0002c90300000007", gid[:]),
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var bad bytes.Buffer
	if code := Run(context.Background(), []string{"--addr", addr.String(), "--lun", "mem:1M", "--ioc-guid", "zz"}, &bad); code != 2 ||
		!strings.Contains(bad.String(), "hex GUID") {
		t.Errorf("bad GUID: code %d, output %q", code, bad.String())
	}
}
