// Package demo runs `softib demo`, the whole stack in one process on
// loopback.
//
// RunStack starts a small LNet cluster (StartCluster: three lnet.Instances
// on 127.0.0.2, .3 and .4, each with a socklnd tcp NI whose acceptor is on
// a free high port, and an o2ib NI over its own rxe device and RDMA CM),
// runs lnet_selftest through the selftest console API on each net (brw
// write and read at 1 MiB and 4 KiB with check=full, and ping; one client,
// the other nodes servers), then a short RDMA verbs sweep.
//
// Sweep is that sweep alone (`softib demo --rdma`): two Soft-RoCE devices,
// RC QPs connected in-process, write/read/send bandwidth and latency over
// a few message sizes, using the perftest data path.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"softib/tools/perftest"
	"softib/verbs"
)

// Config shapes a sweep. The zero value is the default demo.
type Config struct {
	// AddrA and AddrB are the two devices' addresses (127.0.0.2/.3).
	AddrA, AddrB netip.Addr
	// UDPPort is the devices' UDP port (0 = 4791).
	UDPPort uint16
	// NetMTU is the link MTU the devices assume (0 = the provider's
	// default, 1500: RoCE MTU 1024 as on a stock Ethernet link).
	NetMTU int
	// Sizes are the message sizes (8 B, 4 KiB, 64 KiB, 1 MiB).
	Sizes []int
	// Tests are the tests run (write/read/send BW and latency).
	Tests []perftest.Test
	// Short shrinks the iteration counts (tests).
	Short bool
	// Gbits reports Gb/sec instead of MB/sec.
	Gbits bool
	// Step is called before each run with its label and when it ends.
	Start func(label string)
	Step  func(label string)
	// RunTimeout bounds each run (0 = 30 s).
	RunTimeout time.Duration
}

func (c *Config) setDefaults() {
	if !c.AddrA.IsValid() {
		c.AddrA = netip.MustParseAddr("127.0.0.2")
	}
	if !c.AddrB.IsValid() {
		c.AddrB = netip.MustParseAddr("127.0.0.3")
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{8, 4 << 10, 64 << 10, 1 << 20}
	}
	if len(c.Tests) == 0 {
		c.Tests = []perftest.Test{perftest.WriteBW, perftest.ReadBW, perftest.SendBW,
			perftest.WriteLat, perftest.ReadLat, perftest.SendLat}
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = 30 * time.Second
	}
}

// Runs returns the number of runs the sweep makes.
func (c Config) Runs() int {
	c.setDefaults()
	return len(c.Sizes) * len(c.Tests)
}

// iters picks an iteration count that moves a few MiB per BW run and
// keeps latency runs short.
func (c *Config) iters(t perftest.Test, size int) int {
	if t.IsLat() {
		n := 300
		if size >= 64<<10 {
			n = 40
		}
		if c.Short {
			n = max(n/10, 10)
		}
		return n
	}
	budget := 64 << 20
	if c.Short {
		budget = 4 << 20
	}
	return min(max(budget/size, 50), 5000)
}

// OpenPair opens the two devices of the demo.
func OpenPair(c Config) (a, b verbs.Device, err error) {
	c.setDefaults()
	a, err = openRXE(verbs.DeviceConfig{Name: "rxe0", Addr: c.AddrA, Port: c.UDPPort, NetMTU: c.NetMTU})
	if err != nil {
		return nil, nil, fmt.Errorf("open device on %v: %w", c.AddrA, err)
	}
	b, err = openRXE(verbs.DeviceConfig{Name: "rxe1", Addr: c.AddrB, Port: c.UDPPort, NetMTU: c.NetMTU})
	if err != nil {
		CloseDevice(a)
		return nil, nil, fmt.Errorf("open device on %v: %w", c.AddrB, err)
	}
	return a, b, nil
}

// Sweep runs every test at every size between a (requester) and b.
func Sweep(ctx context.Context, a, b verbs.Device, c Config) ([]perftest.Row, error) {
	c.setDefaults()
	var rows []perftest.Row
	for _, t := range c.Tests {
		r, err := sweepTest(ctx, a, b, &c, t)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func sweepTest(ctx context.Context, a, b verbs.Device, c *Config, t perftest.Test) ([]perftest.Row, error) {
	maxSize := 0
	for _, s := range c.Sizes {
		maxSize = max(maxSize, s)
	}
	if t.Verb() == perftest.VerbAtomic {
		maxSize = 8
	}
	pc := perftest.Config{Test: t, Size: maxSize, Iters: 1, QPs: 1, GIDIndex: -1, Port: 1}
	if !t.IsLat() {
		pc.TxDepth, pc.CQMod, pc.RxDepth = perftest.DefaultTxBW, 16, perftest.DefaultRxSend
	} else {
		pc.TxDepth, pc.CQMod, pc.RxDepth = 1, 1, 64
	}
	pa, err := a.QueryPort(1)
	if err != nil {
		return nil, err
	}
	pb, err := b.QueryPort(1)
	if err != nil {
		return nil, err
	}
	mtu := min(pa.ActiveMTU, pb.ActiveMTU)
	ra, err := perftest.NewResources(a, &pc, mtu, perftest.DefaultCycle, perftest.DefaultCacheLine)
	if err != nil {
		return nil, err
	}
	defer ra.Close()
	rb, err := perftest.NewResources(b, &pc, mtu, perftest.DefaultCycle, perftest.DefaultCacheLine)
	if err != nil {
		return nil, err
	}
	defer rb.Close()
	ra.Remote, rb.Remote = rb.Local, ra.Local
	if c.UDPPort != 0 && c.UDPPort != 4791 {
		pc.PeerUDPPort = c.UDPPort
	}
	if err := ra.Connect(&pc, true); err != nil {
		return nil, err
	}
	if err := rb.Connect(&pc, false); err != nil {
		return nil, err
	}
	var rows []perftest.Row
	for _, size := range c.Sizes {
		if t.Verb() == perftest.VerbAtomic {
			size = 8
		}
		label := fmt.Sprintf("%-10s %s", t, SizeString(size))
		if c.Start != nil {
			c.Start(label)
		}
		row, err := runOne(ctx, ra.Engine, rb.Engine, c, t, size, pc.RxDepth)
		if err != nil {
			return rows, fmt.Errorf("%s %d bytes: %w", t, size, err)
		}
		rows = append(rows, row)
		if c.Step != nil {
			c.Step(label)
		}
	}
	return rows, nil
}

// runOne runs one test at one size; rxCap is the QPs' receive queue size.
func runOne(ctx context.Context, ea, eb *perftest.Engine, c *Config, t perftest.Test, size, rxCap int) (perftest.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, c.RunTimeout)
	defer cancel()
	n := c.iters(t, size)
	if t.Verb() == perftest.VerbSend {
		// Every receive posted for this size must be consumed by it, or
		// the next (larger) size lands in a too small buffer.
		ea.RxDepth = min(rxCap, n)
		eb.RxDepth = ea.RxDepth
	}
	if !t.IsLat() {
		// Bound the bytes in flight (4 MiB): a loopback sweep gains
		// nothing from deeper queues of large messages.
		ea.TxDepth = min(max((4<<20)/size, 1), perftest.DefaultTxBW)
		ea.CQMod = min(16, ea.TxDepth)
	}
	var zero time.Time
	// both runs the client on ea and, when the test needs it, the server
	// on eb at the same time.
	both := func(client func() (*perftest.Sample, error), server func() error) (*perftest.Sample, error) {
		var wg sync.WaitGroup
		var serr error
		if server != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if serr = server(); serr != nil {
					cancel()
				}
			}()
		}
		s, err := client()
		if err != nil {
			cancel()
		}
		wg.Wait()
		return s, errors.Join(err, serr)
	}
	var s *perftest.Sample
	var err error
	switch t {
	case perftest.WriteBW, perftest.ReadBW, perftest.AtomicBW:
		s, err = ea.BW(ctx, size, n, zero)
	case perftest.SendBW:
		if err = eb.PostRecvs(size); err != nil {
			return perftest.Row{}, err
		}
		s, err = both(func() (*perftest.Sample, error) { return ea.BW(ctx, size, n, zero) },
			func() error { _, err := eb.RecvBW(ctx, size, n, zero); return err })
	case perftest.WriteLat:
		s, err = both(func() (*perftest.Sample, error) { return ea.WriteLat(ctx, size, n, true, zero) },
			func() error { _, err := eb.WriteLat(ctx, size, n, false, zero); return err })
	case perftest.ReadLat, perftest.AtomicLat:
		s, err = ea.LatReq(ctx, size, n, zero)
	case perftest.SendLat:
		if err = ea.PostRecvs(size); err == nil {
			err = eb.PostRecvs(size)
		}
		if err != nil {
			return perftest.Row{}, err
		}
		s, err = both(func() (*perftest.Sample, error) { return ea.SendLat(ctx, size, n, true, zero) },
			func() error { _, err := eb.SendLat(ctx, size, n, false, zero); return err })
	}
	if err != nil {
		return perftest.Row{}, err
	}
	if t.IsLat() {
		return perftest.LatRow(t, s), nil
	}
	return perftest.BWRow(t, s, c.Gbits), nil
}

// SizeString formats a byte count as "8 B", "4 KiB", "1 MiB".
func SizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// WriteTable prints the sweep's rows as one table.
func WriteTable(w io.Writer, rows []perftest.Row) {
	unit := "MB/sec"
	for _, r := range rows {
		if r.Unit != "" {
			unit = r.Unit
		}
	}
	fmt.Fprintf(w, "%-11s %8s %7s %14s %14s %16s %16s\n", "test", "bytes", "iters",
		"BW avg["+unit+"]", "MsgRate[Mpps]", "t_typical[usec]", "t_99%[usec]")
	for _, r := range rows {
		if r.Lat {
			fmt.Fprintf(w, "%-11s %8d %7d %14s %14s %16.2f %16.2f\n", r.Test, r.Bytes, r.Iters, "-", "-", r.TTypical, r.P99)
		} else {
			fmt.Fprintf(w, "%-11s %8d %7d %14.2f %14.6f %16s %16s\n", r.Test, r.Bytes, r.Iters, r.BWAvg, r.MsgRate, "-", "-")
		}
	}
}
