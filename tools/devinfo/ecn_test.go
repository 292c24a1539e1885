package devinfo_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/tools/devinfo"
	"softib/verbs"
)

// TestECNLine: a Soft-RoCE device shows its congestion control, on with
// DCQCN and mlx5's defaults in mlx5's units (all of them with -v and in
// JSON), or off; a device without it (the fake, as a kernel device) has
// no ecn line and no ecn object.
func TestECNLine(t *testing.T) {
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
	const line = "\tphys_port_cnt:\t\t\t1\n\tecn:\t\t\t\ton (DCQCN, min_time_between_cnps 4us)\n"
	if s := text(on, false); !strings.Contains(s, line) || strings.Contains(s, "rpg_max_rate") {
		t.Errorf("ECN on, short output:\n%s", s)
	}
	v := text(on, true)
	for _, want := range []string{
		line + "\t\t\t\t\trpg_max_rate 100000 Mbps\n\t\t\t\t\trpg_min_rate 1 Mbps\n",
		"\t\t\t\t\trpg_min_dec_fac 50%\n", "\t\t\t\t\tdce_tcp_g 1019/1024\n", "\t\t\t\t\tinitial_alpha_value 1023/1024\n",
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
	if s := text(off, true); !strings.Contains(s, "\tecn:\t\t\t\toff\n") || strings.Contains(s, "rpg_") {
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
