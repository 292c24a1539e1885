package devinfo

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"softib/rxe"
)

// ECN is a Soft-RoCE device's RoCEv2 congestion control (rxe.ECNConfig):
// whether it is on and, on, its DCQCN parameters under the names of
// mlx5's congestion-control parameters, in their units (times in µs,
// rates in Mb/s, g and alpha in 1024ths, the decrease factor in %), so
// they compare directly with a ConnectX port's.
type ECN struct {
	Enable    bool   `json:"enable"`
	Algorithm string `json:"algorithm,omitempty"` // "DCQCN"

	MinTimeBetweenCNPs      float64 `json:"min_time_between_cnps_us,omitempty"`
	MaxRate                 float64 `json:"rpg_max_rate_mbps,omitempty"`
	MinRate                 float64 `json:"rpg_min_rate_mbps,omitempty"`
	RateToSetOnFirstCNP     float64 `json:"rate_to_set_on_first_cnp_mbps,omitempty"`
	MinDecFac               float64 `json:"rpg_min_dec_fac,omitempty"`
	RateReduceMonitorPeriod float64 `json:"rate_reduce_monitor_period_us,omitempty"`
	DCETCPG                 float64 `json:"dce_tcp_g,omitempty"`
	DCETCPRTT               float64 `json:"dce_tcp_rtt_us,omitempty"`
	InitialAlphaValue       float64 `json:"initial_alpha_value,omitempty"`
	TimeReset               float64 `json:"rpg_time_reset_us,omitempty"`
	ByteReset               int     `json:"rpg_byte_reset,omitempty"`
	Threshold               int     `json:"rpg_threshold,omitempty"`
	AIRate                  float64 `json:"rpg_ai_rate_mbps,omitempty"`
	HAIRate                 float64 `json:"rpg_hai_rate_mbps,omitempty"`
	Burst                   int     `json:"burst_bytes,omitempty"` // softib's: bytes a paced QP may send at once
}

// ecnDevice is a device with congestion control to report (*rxe.Device).
type ecnDevice interface{ ECN() rxe.ECNConfig }

// ecnOf converts a device's configuration (defaults filled in).
func ecnOf(c rxe.ECNConfig) *ECN {
	if !c.Enable {
		return &ECN{}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	mb := func(r float64) float64 { return r / 1e6 }
	return &ECN{Enable: true, Algorithm: "DCQCN",
		MinTimeBetweenCNPs: us(c.MinTimeBetweenCNPs), MaxRate: mb(c.MaxRate), MinRate: mb(c.MinRate),
		RateToSetOnFirstCNP: mb(c.FirstCNPRate), MinDecFac: c.MinDecFactor * 100,
		RateReduceMonitorPeriod: us(c.RateReducePeriod), DCETCPG: c.AlphaG * 1024, DCETCPRTT: us(c.AlphaPeriod),
		InitialAlphaValue: c.InitialAlpha * 1024, TimeReset: us(c.TimeReset), ByteReset: c.ByteReset,
		Threshold: c.Threshold, AIRate: mb(c.AIRate), HAIRate: mb(c.HAIRate), Burst: c.Burst}
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// summary is the ecn line's value: off, or on with the algorithm and
// the CNP pacing (what decides how often a marked flow is told).
func (e *ECN) summary() string {
	if !e.Enable {
		return "off"
	}
	return fmt.Sprintf("on (%s, min_time_between_cnps %sus)", e.Algorithm, num(e.MinTimeBetweenCNPs))
}

// params are the parameters -v lists under the ecn line, in mlx5's
// order.
func (e *ECN) params() []string {
	if !e.Enable {
		return nil
	}
	return []string{
		"rpg_max_rate " + num(e.MaxRate) + " Mbps",
		"rpg_min_rate " + num(e.MinRate) + " Mbps",
		"rate_to_set_on_first_cnp " + num(e.RateToSetOnFirstCNP) + " Mbps",
		"rpg_min_dec_fac " + num(e.MinDecFac) + "%",
		"rate_reduce_monitor_period " + num(e.RateReduceMonitorPeriod) + "us",
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

// write adds the ecn line (and with verbose the parameters) to b.
func (e *ECN) write(b *strings.Builder, line func(name, val string), verbose bool) {
	line("ecn", e.summary())
	if verbose {
		for _, p := range e.params() {
			fmt.Fprintf(b, "\t\t\t\t\t%s\n", p)
		}
	}
}
