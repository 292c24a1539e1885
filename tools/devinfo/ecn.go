package devinfo

import (
	"fmt"
	"strconv"
	"strings"

	"softib/rxe"
)

// ECN is a Soft-RoCE device's RoCEv2 congestion control (rxe.ECNConfig):
// whether it is on and, on, its DCQCN parameters under the names of
// mlx5's congestion-control parameters, in their units (rxe.ECNInfo).
type ECN = rxe.ECNInfo

// ecnDevice is a device with congestion control to report (*rxe.Device).
type ecnDevice interface{ ECN() rxe.ECNConfig }

// ecnOf converts a device's configuration (defaults filled in).
func ecnOf(c rxe.ECNConfig) *ECN {
	e := c.Info()
	return &e
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ecnSummary is the ecn line's value: off, or on with the algorithm and
// the CNP pacing (what decides how often a marked flow is told).
func ecnSummary(e *ECN) string {
	if !e.Enable {
		return "off"
	}
	return fmt.Sprintf("on (%s, min_time_between_cnps %sus)", e.Algorithm, num(e.MinTimeBetweenCNPs))
}

// ecnParams are the parameters -v lists under the ecn line, in mlx5's
// order.
func ecnParams(e *ECN) []string {
	if !e.Enable {
		return nil
	}
	return []string{
		"rpg_max_rate " + num(e.MaxRate) + " Mbps",
		"rpg_min_rate " + num(e.MinRate) + " Mbps",
		"rate_to_set_on_first_cnp " + num(e.RateToSetOnFirstCNP) + " Mbps",
		"rpg_min_dec_fac " + num(e.MinDecFac) + "%",
		"rate_reduce_monitor_period " + num(e.RateReduceMonitorPeriod) + "us",
		"clamp_tgt_rate " + bit(e.ClampTgtRate),
		"clamp_tgt_rate_after_time_inc " + bit(e.ClampTgtRateAfterTimeInc),
		"dce_tcp_g " + num(e.DCETCPG) + "/1024",
		"dce_tcp_rtt " + num(e.DCETCPRTT) + "us",
		"initial_alpha_value " + num(e.InitialAlphaValue) + "/1024",
		"rpg_time_reset " + num(e.TimeReset) + "us",
		"rpg_byte_reset " + strconv.Itoa(e.ByteReset) + " bytes",
		"rpg_threshold " + strconv.Itoa(e.Threshold),
		"rpg_ai_rate " + num(e.AIRate) + " Mbps",
		"rpg_hai_rate " + num(e.HAIRate) + " Mbps",
		"burst " + strconv.Itoa(e.Burst) + " bytes",
	}
}

// writeECN adds the ecn line (and with verbose the parameters) to b.
// The setting is the running process's when one holds the device's
// address (in.Running), else this process's own device's, which the
// line says.
func writeECN(b *strings.Builder, in *Info, line func(name, val string), verbose bool) {
	params := func(e *ECN) {
		if verbose {
			for _, p := range ecnParams(e) {
				fmt.Fprintf(b, "\t\t\t\t\t%s\n", p)
			}
		}
	}
	if len(in.Running) == 0 {
		line("ecn", ecnSummary(in.ECN)+" ["+ownNote(in)+"]")
		params(in.ECN)
		return
	}
	for _, r := range in.Running {
		line("ecn", fmt.Sprintf("%s [pid %d %s]", ecnSummary(r.ECN), r.PID, r.Comm))
		params(r.ECN)
	}
}

// ownNote says whose setting an ecn line without a running process
// shows.
func ownNote(in *Info) string {
	if in.Addr.IsValid() {
		return "this command's device: no softib process holds " + in.Addr.String()
	}
	return "this command's device"
}
