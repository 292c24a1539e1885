// Package targettest is the test rig the iSER and SRP target tests
// share: two Soft-RoCE devices on a loopback network under one RDMA CM
// manager (and their IB CMs), a target served for the length of a test, file LUNs, and
// the fio-like benchmark patterns. Only tests import it.
package targettest

import (
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"softib/cm"
	"softib/rdmacm"
	"softib/rxe"
	"softib/storage/scsi"
)

// Net returns an RDMA CM manager with two rxe devices that open makes
// (verbstest.Loopback().Open: unique addresses per test binary; the
// harness is the tests' to import): the target listens on a, the
// initiator dials from b. The test's end closes them.
func Net(t testing.TB, open func(testing.TB, rxe.Config) *rxe.Device) (m *rdmacm.Manager, a, b netip.Addr) {
	t.Helper()
	return network(t, open, rdmacm.Config{})
}

// NetIBCM is [Net] that also hands back each device's IB CM (cms[0] is
// a's, cms[1] b's; cms[i].Port() is its GSI agent), for logins over the
// IB CM and MAD agents.
func NetIBCM(t testing.TB, open func(testing.TB, rxe.Config) *rxe.Device) (m *rdmacm.Manager, a, b netip.Addr, cms [2]*cm.CM) {
	t.Helper()
	n := 0
	m, a, b = network(t, open, rdmacm.Config{CM: cm.Config{Attached: func(c *cm.CM, _ *cm.GSI) {
		if n < 2 {
			cms[n] = c
		}
		n++
	}}})
	return m, a, b, cms
}

func network(t testing.TB, open func(testing.TB, rxe.Config) *rxe.Device, cfg rdmacm.Config) (m *rdmacm.Manager, a, b netip.Addr) {
	t.Helper()
	m = rdmacm.NewManager(cfg)
	t.Cleanup(func() { m.Close() })
	for _, p := range []*netip.Addr{&a, &b} {
		d := open(t, rxe.Config{})
		if err := m.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		*p = d.Addr().Addr()
	}
	return m, a, b
}

// Target is an iSER or SRP target.
type Target interface {
	Listen() error
	Serve(ctx context.Context) error
	Close() error
}

// Serve starts tgt's listener and serves it until the test ends.
func Serve(t testing.TB, tgt Target) {
	t.Helper()
	if err := tgt.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tgt.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); tgt.Close(); <-done })
}

// FileLUN adds LUN lun to st on a size-byte [DataFile].
func FileLUN(t testing.TB, st *scsi.Target, lun uint64, size int64, maxTransfer uint32) {
	t.Helper()
	fb, err := scsi.OpenFile(DataFile(t, size), size, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddLUN(lun, fb, scsi.LUNConfig{MaxTransfer: maxTransfer}); err != nil {
		t.Fatal(err)
	}
}

// DataFile returns the path of a size-byte file in the test's temporary
// directory, written through (no holes: reads cost what reads of data
// cost) and synced.
func DataFile(t testing.TB, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lun")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>9)
	}
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), size-off)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return path
}

// RW10 returns a 16-byte CDB buffer with READ(10) or WRITE(10) (op) of
// n blocks at lba.
func RW10(op byte, lba uint32, n uint16) []byte {
	c := make([]byte, 16)
	c[0] = op
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], n)
	return c
}

// BenchCase is one fio-like pattern: BS-byte reads or writes,
// sequential or random.
type BenchCase struct {
	Name        string
	BS          int
	Write, Rand bool
}

// BenchCases are the patterns the target benchmarks run.
var BenchCases = []BenchCase{{"seq-read-128k", 128 << 10, false, false}, {"seq-write-128k", 128 << 10, true, false},
	{"rand-read-4k", 4096, false, true}, {"rand-write-4k", 4096, true, true}}

// CPU is the process's CPU time (user and system, getrusage) at the
// start of a measurement: targets, initiator and both rxe devices run
// in the benchmark's process, so it is the whole loopback's cost. On a
// shared machine throughput says little; CPU per unit of work does.
type CPU time.Duration

// StartCPU reads the process's CPU time.
func StartCPU() CPU { return CPU(cpuNow()) }

// Report adds the CPU time spent since c per MiB moved ("cpu-ms/MiB")
// to b's results.
func (c CPU) Report(b *testing.B, bytes int64) {
	if bytes <= 0 {
		return
	}
	used := cpuNow() - time.Duration(c)
	b.ReportMetric(float64(used)/float64(time.Millisecond)/(float64(bytes)/(1<<20)), "cpu-ms/MiB")
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
