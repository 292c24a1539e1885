package devinfo_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/tools/devinfo"
	"softib/tools/stat"
	"softib/verbs"
)

// TestECNLine: a Soft-RoCE device shows its congestion control, on with
// DCQCN and mlx5's defaults in mlx5's units (all of them with -v and in
// JSON), or off; a device without it (the fake, as a kernel device) has
// no ecn line and no ecn object.
func TestECNLine(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // no other process's device
	open := func(c rxe.ECNConfig) *devinfo.Info {
		t.Helper()
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}, ECN: c})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		return devinfo.Collect(d)
	}
	text := func(in *devinfo.Info, verbose bool) string {
		var b bytes.Buffer
		devinfo.Write(&b, in, verbose)
		return b.String()
	}
	jsonECN := func(in *devinfo.Info) map[string]any {
		t.Helper()
		j, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			t.Fatal(err)
		}
		e, _ := m["ecn"].(map[string]any)
		return e
	}

	on := open(rxe.ECNConfig{Enable: true})
	line := "\tphys_port_cnt:\t\t\t1\n\tecn:\t\t\t\ton (DCQCN, min_time_between_cnps 4us) [this command's device: no softib process holds " +
		on.Addr.String() + "]\n"
	if s := text(on, false); !strings.Contains(s, line) || strings.Contains(s, "rpg_max_rate") {
		t.Errorf("ECN on, short output:\n%s", s)
	}
	v := text(on, true)
	for _, want := range []string{
		line + "\t\t\t\t\trpg_max_rate 100000 Mbps\n\t\t\t\t\trpg_min_rate 1 Mbps\n",
		"\t\t\t\t\trpg_min_dec_fac 50%\n", "\t\t\t\t\tdce_tcp_g 1019/1024\n", "\t\t\t\t\tinitial_alpha_value 1023/1024\n",
		"\t\t\t\t\trate_reduce_monitor_period 4us\n\t\t\t\t\tclamp_tgt_rate 0\n\t\t\t\t\tclamp_tgt_rate_after_time_inc 1\n",
		"\t\t\t\t\trpg_time_reset 300us\n", "\t\t\t\t\trpg_byte_reset 32767 bytes\n", "\t\t\t\t\trpg_ai_rate 5 Mbps\n",
		"\t\t\t\t\trpg_hai_rate 50 Mbps\n", "\t\t\t\t\tburst 65536 bytes\n\tmax_mr_size:",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("ECN on, -v output lacks %q:\n%s", want, v)
		}
	}
	e := jsonECN(on)
	if e["enable"] != true || e["algorithm"] != "DCQCN" || e["min_time_between_cnps_us"] != 4.0 || e["rpg_max_rate_mbps"] != 100000.0 ||
		e["rpg_time_reset_us"] != 300.0 || e["dce_tcp_g"] != 1019.0 || e["rpg_threshold"] != 1.0 {
		t.Errorf("ECN on, json: %v", e)
	}

	// Parameters set by the application show as set.
	custom := open(rxe.ECNConfig{Enable: true, MinTimeBetweenCNPs: 500 * time.Nanosecond, MaxRate: 25e9, FirstCNPRate: 2.5e9})
	if v := text(custom, true); !strings.Contains(v, "on (DCQCN, min_time_between_cnps 0.5us)") ||
		!strings.Contains(v, "rpg_max_rate 25000 Mbps") || !strings.Contains(v, "rate_to_set_on_first_cnp 2500 Mbps") {
		t.Errorf("custom ECN, -v output:\n%s", v)
	}

	off := open(rxe.ECNConfig{})
	if s := text(off, true); !strings.Contains(s, "\tecn:\t\t\t\toff [this command's device: no softib process holds "+off.Addr.String()+"]\n") ||
		strings.Contains(s, "rpg_") {
		t.Errorf("ECN off:\n%s", s)
	}
	if e := jsonECN(off); len(e) != 1 || e["enable"] != false {
		t.Errorf("ECN off, json: %v", e)
	}

	kernel := devinfo.Collect(fakeDev{})
	if s := text(kernel, true); strings.Contains(s, "ecn") {
		t.Errorf("device without congestion control shows it:\n%s", s)
	}
	if e := jsonECN(kernel); e != nil {
		t.Errorf("device without congestion control, json: %v", e)
	}
}

// TestECNRunning: when another process holds a Soft-RoCE device at the
// address asked for (its softib stat socket; here this process's, with
// devinfo acting as another), the ecn line shows that device's setting
// with its process, not devinfo's own device's (on another address, as
// devsel takes one when the default address is held); -v lists its
// parameters and --json has it under running. A device at another
// address is not it, and a process's own sockets are left out.
func TestECNRunning(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	pub := func(c rxe.ECNConfig) *rxe.Device {
		t.Helper()
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}, ECN: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		s, err := stat.Publish(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return d.(*rxe.Device)
	}
	held := pub(rxe.ECNConfig{Enable: true, MaxRate: 25e9})
	pub(rxe.ECNConfig{}) // another address
	// devinfo's own device, ECN off (no --ecn), elsewhere.
	own, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()

	in := devinfo.CollectAs(own, held.Addr(), -1)
	if in.ECN == nil || in.ECN.Enable || in.Addr != held.Addr() || len(in.Running) != 1 || in.Running[0].PID != os.Getpid() || !in.Running[0].ECN.Enable {
		t.Fatalf("info: own %+v at %v, running %+v", in.ECN, in.Addr, in.Running)
	}
	var b bytes.Buffer
	devinfo.Write(&b, in, true)
	want := fmt.Sprintf("\tecn:\t\t\t\ton (DCQCN, min_time_between_cnps 4us) [pid %d %s]\n\t\t\t\t\trpg_max_rate 25000 Mbps\n", os.Getpid(), in.Running[0].Comm)
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "ecn:\t\t\t\toff") {
		t.Errorf("-v output lacks %q:\n%s", want, b.String())
	}
	j, _ := json.Marshal(in)
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	if r, _ := m["running"].([]any); len(r) != 1 || r[0].(map[string]any)["ecn"].(map[string]any)["rpg_max_rate_mbps"] != 25000.0 ||
		m["ecn"].(map[string]any)["enable"] != false || m["addr"] != held.Addr().String() {
		t.Errorf("json: %s", j)
	}

	// Nobody else at devinfo's own address: its own setting, said so.
	b.Reset()
	devinfo.Write(&b, devinfo.CollectAs(own, netip.AddrPort{}, -1), false)
	if want := "\tecn:\t\t\t\toff [this command's device: no softib process holds " + own.(*rxe.Device).Addr().String() + "]\n"; !strings.Contains(b.String(), want) {
		t.Errorf("own address: output lacks %q:\n%s", want, b.String())
	}
	// CollectAt leaves out this process's sockets (devinfo publishes its
	// own device).
	if in := devinfo.CollectAt(own, held.Addr()); len(in.Running) != 0 {
		t.Errorf("CollectAt lists its own process: %+v", in.Running)
	}
}
