package pingpong_test

import (
	"io"
	"testing"

	"softib/tools/devsel"
	"softib/tools/pingpong"
)

func TestFlags(t *testing.T) {
	fs := devsel.NewFlagSet("rc_pingpong", io.Discard)
	dev := devsel.NewOptions()
	dev.Register(fs, 1, "g", "gid-idx")
	f, err := pingpong.RegisterFlags(fs, pingpong.RC)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := devsel.ParseArgs(fs, []string{"-s", "64", "10.0.0.1", "-n", "10", "--mtu=2048", "-c", "-g", "0", "--addr", "127.0.0.5", "-e"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Finish(pos)
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "10.0.0.1" || c.Size != 64 || c.Iters != 10 || c.MTU != 2048 || !c.Check || !c.Events || c.RxDepth != 500 || c.TCPPort != 18515 {
		t.Errorf("config %+v", c)
	}
	if dev.GIDIndex != 0 || dev.Addr != "127.0.0.5" {
		t.Errorf("device options %+v", dev)
	}

	fs = devsel.NewFlagSet("ud_pingpong", io.Discard)
	f, _ = pingpong.RegisterFlags(fs, pingpong.UD)
	pos, _ = devsel.ParseArgs(fs, nil)
	if c, err := f.Finish(pos); err != nil || c.Size != 2048 || c.Host != "" {
		t.Errorf("UD defaults %+v %v", c, err)
	}
	if fs.Lookup("m") != nil {
		t.Error("ud_pingpong has no -m")
	}

	fs = devsel.NewFlagSet("rc_pingpong", io.Discard)
	f, _ = pingpong.RegisterFlags(fs, pingpong.RC)
	pos, _ = devsel.ParseArgs(fs, []string{"-m", "1000"})
	if _, err := f.Finish(pos); err == nil {
		t.Error("bad MTU accepted")
	}
}
