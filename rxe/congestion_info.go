package rxe

import "time"

// ECNInfo is a device's congestion-control configuration as softib's
// tools show it (softib devinfo, the softib stat snapshot, the metrics
// exporter): whether it is on and, on, its DCQCN parameters under the
// names of mlx5's congestion-control parameters (roce_rp, roce_np), in
// their units (times in µs, rates in Mb/s, g and alpha in 1024ths, the
// decrease factor in %), so they compare directly with a ConnectX
// port's. Off, only Enable is set.
type ECNInfo struct {
	Enable    bool   `json:"enable"`
	Algorithm string `json:"algorithm,omitempty"` // "DCQCN"

	MinTimeBetweenCNPs       float64 `json:"min_time_between_cnps_us,omitempty"`
	MaxRate                  float64 `json:"rpg_max_rate_mbps,omitempty"`
	MinRate                  float64 `json:"rpg_min_rate_mbps,omitempty"`
	RateToSetOnFirstCNP      float64 `json:"rate_to_set_on_first_cnp_mbps,omitempty"`
	MinDecFac                float64 `json:"rpg_min_dec_fac,omitempty"`
	RateReduceMonitorPeriod  float64 `json:"rate_reduce_monitor_period_us,omitempty"`
	ClampTgtRate             bool    `json:"clamp_tgt_rate,omitempty"`
	ClampTgtRateAfterTimeInc bool    `json:"clamp_tgt_rate_after_time_inc,omitempty"` // always on (ECNConfig.ClampTargetRate)
	DCETCPG                  float64 `json:"dce_tcp_g,omitempty"`
	DCETCPRTT                float64 `json:"dce_tcp_rtt_us,omitempty"`
	InitialAlphaValue        float64 `json:"initial_alpha_value,omitempty"`
	TimeReset                float64 `json:"rpg_time_reset_us,omitempty"`
	ByteReset                int     `json:"rpg_byte_reset,omitempty"`
	Threshold                int     `json:"rpg_threshold,omitempty"`
	AIRate                   float64 `json:"rpg_ai_rate_mbps,omitempty"`
	HAIRate                  float64 `json:"rpg_hai_rate_mbps,omitempty"`
	Burst                    int     `json:"burst_bytes,omitempty"` // softib's: bytes a paced QP may send at once
}

// Info converts the configuration (defaults filled in, as Device.ECN
// returns it) to its mlx5 names and units.
func (c ECNConfig) Info() ECNInfo {
	if !c.Enable {
		return ECNInfo{}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	mb := func(r float64) float64 { return r / 1e6 }
	return ECNInfo{Enable: true, Algorithm: "DCQCN",
		MinTimeBetweenCNPs: us(c.MinTimeBetweenCNPs), MaxRate: mb(c.MaxRate), MinRate: mb(c.MinRate),
		RateToSetOnFirstCNP: mb(c.FirstCNPRate), MinDecFac: c.MinDecFactor * 100,
		RateReduceMonitorPeriod: us(c.RateReducePeriod), ClampTgtRate: c.ClampTargetRate, ClampTgtRateAfterTimeInc: true,
		DCETCPG: c.AlphaG * 1024, DCETCPRTT: us(c.AlphaPeriod),
		InitialAlphaValue: c.InitialAlpha * 1024, TimeReset: us(c.TimeReset), ByteReset: c.ByteReset,
		Threshold: c.Threshold, AIRate: mb(c.AIRate), HAIRate: mb(c.HAIRate), Burst: c.Burst}
}
