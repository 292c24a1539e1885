package udp_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// windowBytes is how far the sender may be ahead of the receiver.
// Credits keep the benchmarks from measuring socket-buffer overflow:
// what they measure is received throughput.
const windowBytes = 4 << 20

// blast runs a sender and a receiver of b.N datagrams of size bytes and
// reports received GB/s, packets/s and loss. send/recv move up to batch
// datagrams and return how many they moved.
func blast(b *testing.B, size, batch int,
	send func(n int) (int, error), recv func() (int, error), closeRx func()) {
	b.Helper()
	window := max(windowBytes/size, 2*batch)
	credits := make(chan int, window*2)
	done := make(chan int)
	total := b.N
	go func() {
		got := 0
		for got < total {
			n, err := recv()
			if err != nil {
				break
			}
			got += n
			credits <- n
		}
		done <- got
	}()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	avail := window
	for sent := 0; sent < total; {
		for avail < batch && avail < total-sent {
			avail += <-credits
		}
		n, err := send(min(batch, total-sent))
		if err != nil {
			b.Fatal(err)
		}
		sent += n
		avail -= n
	}
	var got int
	select {
	case got = <-done:
	case <-time.After(time.Second):
		// Datagrams were lost; stop the receiver and report the loss.
		closeRx()
		got = <-done
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(100*float64(total-got)/float64(total), "loss-%")
	b.ReportMetric(float64(got)*float64(size)/el.Seconds()/1e9, "rx-GB/s")
	b.ReportMetric(float64(got)/el.Seconds(), "pkts/s")
}

func benchSocket(b *testing.B, size int, cfg udp.Config) { benchSocketOn(b, "127.0.0.1:0", size, cfg) }

func benchSocketOn(b *testing.B, addr string, size int, cfg udp.Config) {
	tx := listen(b, addr, &cfg)
	rx := listen(b, addr, &cfg)
	batch := tx.BatchSize()
	out := make([]udp.Message, batch)
	for i := range out {
		out[i] = udp.Message{Buf: make([]byte, size), N: size, Addr: rx.LocalAddr()}
	}
	in := make([]udp.Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, size+64)
	}
	blast(b, size, batch,
		func(n int) (int, error) { return tx.WriteBatch(out[:n]) },
		func() (int, error) { return rx.ReadBatch(in) },
		func() { rx.Close() })
	if err := tx.GSODisabled(); err != nil {
		b.Logf("GSO disabled: %v", err)
	}
}

// BenchmarkSocket4K measures 4 KiB datagrams through udp.Socket with
// offloads (gso+gro), with sendmmsg/recvmmsg only (mmsg), and one
// datagram per syscall (single).
func BenchmarkSocket4K(b *testing.B) {
	b.Run("gso+gro", func(b *testing.B) { benchSocket(b, 4096, udp.Config{}) })
	b.Run("gso+gro-v6", func(b *testing.B) { benchSocketOn(b, "[::1]:0", 4096, udp.Config{}) })
	b.Run("mmsg", func(b *testing.B) {
		benchSocket(b, 4096, udp.Config{DisableGSO: true, DisableGRO: true})
	})
	b.Run("single", func(b *testing.B) {
		benchSocket(b, 4096, udp.Config{BatchSize: 1, DisableGSO: true, DisableGRO: true})
	})
}

func benchRaw(b *testing.B, size int) {
	rx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	for _, c := range []*net.UDPConn{rx, tx} {
		forceBuffers(b, c)
	}
	dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	out, in := make([]byte, size), make([]byte, size)
	blast(b, size, 1,
		func(int) (int, error) {
			_, err := tx.WriteToUDPAddrPort(out, dst)
			return 1, err
		},
		func() (int, error) {
			_, _, err := rx.ReadFromUDPAddrPort(in)
			return 1, err
		},
		func() { rx.Close() })
}

// forceBuffers gives a plain UDPConn the same socket buffers as a
// udp.Socket (SetReadBuffer is clamped by net.core.rmem_max).
func forceBuffers(b *testing.B, c *net.UDPConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		for _, o := range []int{unix.SO_RCVBUFFORCE, unix.SO_SNDBUFFORCE} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o, udp.DefaultSocketBuffer) != nil {
				c.SetReadBuffer(udp.DefaultSocketBuffer)
				c.SetWriteBuffer(udp.DefaultSocketBuffer)
			}
		}
	})
}

// BenchmarkRawUDP64K is the baseline of plain Go net.UDPConn with
// maximal (65507-byte) datagrams, one per syscall.
func BenchmarkRawUDP64K(b *testing.B) { benchRaw(b, 65507) }

// BenchmarkRawUDP4K is plain Go net.UDPConn with 4 KiB datagrams.
func BenchmarkRawUDP4K(b *testing.B) { benchRaw(b, 4096) }

// BenchmarkPingPong8B measures one-way latency (RTT/2) of 8-byte
// datagrams between two sockets, parked in the netpoller or busy-polling.
func BenchmarkPingPong8B(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  udp.Config
	}{{"netpoll", udp.Config{}}, {"busypoll", udp.Config{BusyPoll: true}}} {
		b.Run(c.name, func(b *testing.B) {
			p := listen(b, "127.0.0.1:0", &c.cfg)
			q := listen(b, "127.0.0.1:0", &c.cfg)
			go func() {
				m := []udp.Message{{Buf: make([]byte, 64)}}
				for {
					if _, err := q.ReadBatch(m); err != nil {
						return
					}
					if _, err := q.WriteBatch(m[:1]); err != nil {
						return
					}
				}
			}()
			out := []udp.Message{{Buf: make([]byte, 8), N: 8, Addr: q.LocalAddr()}}
			in := []udp.Message{{Buf: make([]byte, 64)}}
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				if _, err := p.WriteBatch(out); err != nil {
					b.Fatal(err)
				}
				if _, err := p.ReadBatch(in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/2, "µs/one-way")
		})
	}
}

// BenchmarkRawPingPong8B is the plain Go net.UDPConn ping-pong baseline
// for BenchmarkPingPong8B.
func BenchmarkRawPingPong8B(b *testing.B) {
	p, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	q, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := q.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if _, err := q.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return
			}
		}
	}()
	dst := q.LocalAddr().(*net.UDPAddr).AddrPort()
	out, in := make([]byte, 8), make([]byte, 64)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := p.WriteToUDPAddrPort(out, dst); err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.ReadFromUDPAddrPort(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/2, "µs/one-way")
}
