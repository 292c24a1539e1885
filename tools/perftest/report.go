package perftest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"softib/verbs"
)

// Row is one line of a result table.
type Row struct {
	Test  string `json:"test"`
	Bytes int    `json:"bytes"`
	Iters uint64 `json:"iterations"`
	// Lat marks latency rows; Duration rows of -D latency tests carry
	// only TAvg and TPS.
	Lat      bool `json:"-"`
	Duration bool `json:"-"`
	// Bandwidth rows, in Unit (MB/sec = 2^20 bytes/s, or Gb/sec).
	Unit    string  `json:"unit,omitempty"`
	BWPeak  float64 `json:"bw_peak,omitempty"`
	BWAvg   float64 `json:"bw_average,omitempty"`
	MsgRate float64 `json:"msg_rate_mpps,omitempty"`
	// Latency rows, in microseconds.
	TMin     float64 `json:"t_min_usec,omitempty"`
	TMax     float64 `json:"t_max_usec,omitempty"`
	TTypical float64 `json:"t_typical_usec,omitempty"`
	TAvg     float64 `json:"t_avg_usec,omitempty"`
	TStdev   float64 `json:"t_stdev_usec,omitempty"`
	P99      float64 `json:"p99_usec,omitempty"`
	P999     float64 `json:"p99_9_usec,omitempty"`
	TPS      float64 `json:"tps_average,omitempty"`
	// QP is the 1-based QP of a per-QP row (printed under the
	// aggregate with -q N; 0: the aggregate over every QP).
	QP int `json:"qp,omitempty"`
	// Direction marks the rows of a bidirectional run (-b): "both" is
	// the sum perftest prints, "local" and "remote" each side's own
	// sends (--report-both, and the per-QP rows).
	Direction string `json:"direction,omitempty"`
}

// Directions of bidirectional rows.
const (
	DirBoth   = "both"
	DirLocal  = "local"
	DirRemote = "remote"
)

// SumRow is print_full_bw_report's row of a bidirectional run: the local
// row with the remote report's peak, average and message rate added.
func SumRow(local Row, rem *BWReport) Row {
	local.BWPeak += rem.BWPeak
	local.BWAvg += rem.BWAvg
	local.MsgRate += rem.MsgRate
	local.Direction = DirBoth
	return local
}

// Report strings of perftest.
const (
	WaitingBanner   = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
	ResultLine      = "---------------------------------------------------------------------------------------\n"
	ResultFmtBW     = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	ResultFmtBWG    = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	ResultFmtLat    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	ResultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average\n"
)

// Header returns the column header of t's table.
func Header(t Test, gbits, duration bool) string {
	switch {
	case t.IsLat() && duration:
		return ResultFmtLatDur
	case t.IsLat():
		return ResultFmtLat
	case gbits:
		return ResultFmtBWG
	}
	return ResultFmtBW
}

// AppendRow appends r as perftest prints it.
func AppendRow(b []byte, r *Row) []byte {
	switch {
	case r.Lat && r.Duration:
		return fmt.Appendf(b, " %-7d       %d            %-7.2f        %-7.2f\n", r.Bytes, r.Iters, r.TAvg, r.TPS)
	case r.Lat:
		return fmt.Appendf(b, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
			r.Bytes, r.Iters, r.TMin, r.TMax, r.TTypical, r.TAvg, r.TStdev, r.P99, r.P999)
	}
	return fmt.Appendf(b, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Bytes, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// bwScale converts bytes/second to the report unit.
func bwScale(gbits bool) (float64, string) {
	if gbits {
		return 8 / 1e9, "Gb/sec"
	}
	return 1.0 / 0x100000, "MB/sec"
}

// BWRow computes a bandwidth row from a sample: the average over the
// whole run, the peak over the best window between a post and a later
// completion, and the message rate.
func BWRow(t Test, s *Sample, gbits bool) Row {
	scale, unit := bwScale(gbits)
	r := Row{Test: t.String(), Bytes: s.Size, Iters: s.Iters, Unit: unit}
	sec := s.Elapsed.Seconds()
	if sec <= 0 || s.Iters == 0 {
		return r
	}
	r.BWAvg = float64(s.Size) * float64(s.Iters) / sec * scale
	r.MsgRate = float64(s.Iters) / sec / 1e6
	r.BWPeak = r.BWAvg
	if len(s.Posted) == int(s.Iters) && len(s.Completed) > 0 {
		// Window starts: the first message and each one after a
		// completion; ends: the completions. Thin out large runs.
		starts := []int{0}
		for _, c := range s.Completed[:len(s.Completed)-1] {
			starts = append(starts, c.Index+1)
		}
		stride := max(1, len(starts)/512)
		best := math.MaxFloat64
		for si := 0; si < len(starts); si += stride {
			i := starts[si]
			for _, c := range s.Completed {
				if c.Index < i || i >= len(s.Posted) {
					continue
				}
				if d := float64(c.T-s.Posted[i]) / float64(c.Index-i+1); d > 0 && d < best {
					best = d
				}
			}
		}
		if best < math.MaxFloat64 {
			r.BWPeak = float64(s.Size) / (best / 1e9) * scale
		}
	}
	return r
}

// LatTail is the number of largest samples perftest drops.
const LatTail = 2

// LatRow computes a latency row as print_report_lat does: deltas between
// consecutive posts divided by the RTT factor, the two largest dropped,
// the median as t_typical.
func LatRow(t Test, s *Sample) Row {
	r := Row{Test: t.String(), Bytes: s.Size, Iters: s.Iters, Lat: true}
	n := len(s.Posted) - 1
	if n-LatTail < 1 {
		return r
	}
	d := make([]float64, n)
	f := float64(max(s.RTTFactor, 1)) * 1e3
	for i := range n {
		d[i] = float64(s.Posted[i+1]-s.Posted[i]) / f
	}
	slices.Sort(d)
	m := n - LatTail
	if m%2 == 0 {
		r.TTypical = (d[m/2-1] + d[m/2]) / 2
	} else {
		r.TTypical = d[m/2]
	}
	var sum float64
	for _, v := range d[:m] {
		sum += v
	}
	r.TAvg = sum / float64(m)
	var vs float64
	for _, v := range d[:m] {
		vs += (v - r.TAvg) * (v - r.TAvg)
	}
	r.TStdev = math.Sqrt(vs / float64(m))
	r.TMin, r.TMax = d[0], d[m]
	r.P99 = d[min(int(math.Ceil(float64(m)*0.99)), n-1)]
	r.P999 = d[min(int(math.Ceil(float64(m)*0.999)), n-1)]
	return r
}

// LatDurRow computes the row of a -D latency test.
func LatDurRow(t Test, s *Sample) Row {
	r := Row{Test: t.String(), Bytes: s.Size, Iters: s.Iters, Lat: true, Duration: true}
	if s.Iters > 0 && s.Elapsed > 0 {
		us := float64(s.Elapsed.Microseconds())
		r.TAvg = us / float64(s.Iters) / float64(max(s.RTTFactor, 1))
		r.TPS = float64(s.Iters) / s.Elapsed.Seconds()
	}
	return r
}

// RowFromReport makes a row from a peer's BW report.
func RowFromReport(t Test, rep *BWReport, gbits bool) Row {
	_, unit := bwScale(gbits)
	return Row{Test: t.String(), Bytes: int(rep.Size), Iters: rep.Iters, Unit: unit,
		BWPeak: rep.BWPeak, BWAvg: rep.BWAvg, MsgRate: rep.MsgRate}
}

// ReportOf makes the BW report a row stands for.
func ReportOf(r *Row) BWReport {
	return BWReport{Size: uint64(r.Bytes), Iters: r.Iters, BWPeak: r.BWPeak, BWAvg: r.BWAvg, MsgRate: r.MsgRate}
}

// cHex formats v like C's "%#0Nx": zero-padded to width including the
// "0x" prefix, which C omits for zero.
func cHex(v uint64, width int) string {
	if v == 0 {
		return strings.Repeat("0", width)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// AddressLines formats a key as perftest prints it (side "local" or
// "remote"): LID, QPN, PSN, OUT for reads, RKey and VAddr for RDMA
// tests, then the GID in decimal bytes.
func AddressLines(side string, v Verb, k *Key) string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(k.LID), 4), cHex(uint64(k.QPN), 6), cHex(uint64(k.PSN), 6))
	if v == VerbRead {
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(k.OutReads), 4))
	}
	if v == VerbRead || v == VerbWrite {
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(k.RKey), 8), cHex(k.VAddr, 16))
	}
	b.WriteByte('\n')
	if k.HasGID {
		b.WriteString(" GID: ")
		for i, x := range k.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", x)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Banner is what the test-information block shows.
type Banner struct {
	Test     Test
	Atomic   AtomicOp
	Device   string
	QPs      int
	Client   bool
	TxDepth  int
	RxDepth  int
	CQMod    int
	MTU      verbs.MTU
	GIDIndex int
	Inline   int
	OutReads int
	RDMACM   bool
	UC       bool
	UD       bool
	Duplex   bool
	PostList int
	TOS      uint8
}

// WriteBanner writes perftest's test-information block.
func WriteBanner(w io.Writer, b *Banner) {
	var s strings.Builder
	s.WriteString(ResultLine)
	s.WriteString("                    " + b.Test.Verb().Title() + " ")
	if b.Test.Verb() == VerbAtomic {
		s.WriteString(b.Atomic.String() + " ")
	}
	if b.Test.IsLat() {
		s.WriteString("Latency ")
	} else {
		if b.Duplex {
			s.WriteString("Bidirectional ")
		}
		if b.PostList > 1 {
			s.WriteString("Post List ")
		}
		s.WriteString("BW ")
	}
	s.WriteString("Test\n")
	fmt.Fprintf(&s, " Dual-port       : OFF\t\tDevice         : %s\n", b.Device)
	fmt.Fprintf(&s, " Number of qps   : %d\t\tTransport type : IB\n", b.QPs)
	conn := "RC"
	switch {
	case b.UC:
		conn = "UC"
	case b.UD:
		conn = "UD"
	}
	s.WriteString(" Connection type : " + conn + "\t\tUsing SRQ      : OFF\n")
	s.WriteString(" PCIe relax order: Unsupported\n")
	s.WriteString(" ibv_wr* API     : OFF\n")
	if b.Client || b.Test.IsLat() || b.Duplex {
		fmt.Fprintf(&s, " TX depth        : %d\n", b.TxDepth)
	}
	if b.PostList > 1 {
		fmt.Fprintf(&s, " Post List       : %d\n", b.PostList)
	}
	if b.Test.Verb() == VerbSend && (!b.Client || b.Test.IsLat() || b.Duplex) {
		fmt.Fprintf(&s, " RX depth        : %d\n", b.RxDepth)
	}
	if !b.Test.IsLat() {
		fmt.Fprintf(&s, " CQ Moderation   : %d\n", b.CQMod)
	}
	fmt.Fprintf(&s, " Mtu             : %d[B]\n", b.MTU.Bytes())
	s.WriteString(" Link type       : Ethernet\n")
	if b.GIDIndex >= 0 {
		fmt.Fprintf(&s, " GID index       : %d\n", b.GIDIndex)
	}
	if v := b.Test.Verb(); v != VerbRead && v != VerbAtomic {
		fmt.Fprintf(&s, " Max inline data : %d[B]\n", b.Inline)
	} else {
		fmt.Fprintf(&s, " Outstand reads  : %d\n", b.OutReads)
	}
	onOff := map[bool]string{false: "OFF", true: "ON"}
	fmt.Fprintf(&s, " rdma_cm QPs\t : %s\n", onOff[b.RDMACM])
	ex := "Ethernet"
	if b.RDMACM {
		ex = "rdma_cm"
	}
	fmt.Fprintf(&s, " Data ex. method : %s", ex)
	if b.RDMACM && b.TOS != 0 {
		fmt.Fprintf(&s, " \tTOS    : %d", b.TOS)
	}
	s.WriteByte('\n')
	s.WriteString(ResultLine)
	io.WriteString(w, s.String())
}

// LatSamples returns a latency sample's per-iteration times in
// microseconds, in the order they were measured (-U).
func LatSamples(s *Sample) []float64 {
	n := len(s.Posted) - 1
	if n < 1 {
		return nil
	}
	d := make([]float64, n)
	f := float64(max(s.RTTFactor, 1)) * 1e3
	for i := range n {
		d[i] = float64(s.Posted[i+1]-s.Posted[i]) / f
	}
	return d
}

// HistBucket is one bucket of LatHistogram: times in [Usec, Usec+1).
type HistBucket struct {
	Usec  int `json:"usec"`
	Count int `json:"count"`
}

// LatHistogram counts latencies (microseconds) in 1-µs buckets, the
// non-empty ones in order (-H).
func LatHistogram(d []float64) []HistBucket {
	counts := map[int]int{}
	for _, v := range d {
		counts[int(v)]++
	}
	var out []HistBucket
	for u, c := range counts {
		out = append(out, HistBucket{u, c})
	}
	slices.SortFunc(out, func(a, b HistBucket) int { return a.Usec - b.Usec })
	return out
}
