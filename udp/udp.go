// Package udp is softib's batched UDP endpoint: the I/O seam under the
// Soft-RoCE provider. Every call moves a batch of datagrams, so that a
// 4 KiB-payload RoCE stream is not limited by one syscall per packet.
//
// On Linux a Socket uses recvmmsg/sendmmsg, coalesces runs of same-size
// datagrams to the same destination into one UDP GSO send (UDP_SEGMENT),
// and splits GRO super-datagrams (UDP_GRO) back into single datagrams on
// receive. Offloads are probed at Listen and switched off for good if the
// kernel rejects them at send time (see GSODisabledError).
//
// IPv4 sockets set IP_MTU_DISCOVER=IP_PMTUDISC_DO, so every datagram leaves
// unfragmented with DF set and, because the socket is unconnected, with IP
// Identification 0. The RoCEv2 ICRC covers the IP ID and a receiver that
// reads through a UDP socket must assume 0 (roce-wire.md §1.2). For the
// same reason IPv4 GSO is used only towards loopback unless
// Config.IPv4GSO is set: segmentation numbers the IDs 0, 1, 2, ...
//
// Package udp/udptest provides an in-memory Conn with fault injection.
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"softib/internal/stats"
)

// Message is one datagram.
type Message struct {
	// Buf is the datagram buffer. ReadBatch fills Buf[:cap(Buf)] and
	// reports the length in N; WriteBatch sends Buf[:N].
	Buf []byte
	// N is the datagram length in bytes.
	N int
	// Addr is the source address after ReadBatch and the destination
	// address for WriteBatch.
	Addr netip.AddrPort
	// TOS, when not 0, is the IPv4 TOS byte or IPv6 traffic class (ECN
	// bits included) WriteBatch gives this datagram, as an IP_TOS or
	// IPV6_TCLASS control message; 0 leaves the socket's (Config.TOS).
	// RoCEv2 takes it from each QP's address vector, and QPs share a
	// socket, so it is set per datagram rather than per socket.
	// A read on a socket with Config.RecvTOS sets it to the received
	// datagram's TOS byte or traffic class (for its ECN field), and to
	// 0 without RecvTOS.
	TOS uint8
	// TTL, when not 0, is the IPv4 TTL or IPv6 hop limit WriteBatch
	// gives this datagram (IP_TTL or IPV6_HOPLIMIT control message); 0
	// leaves the socket's (Config.TTL, else the kernel default).
	TTL uint8
}

// Conn is a batched datagram endpoint. It is implemented by *Socket and by
// the udptest endpoints. ReadBatch and WriteBatch may be called
// concurrently with each other; concurrent calls of the same method are
// serialized.
type Conn interface {
	// ReadBatch blocks until at least one datagram is available, then
	// fills msgs[:n] and returns n. Each Message receives exactly one
	// datagram (GRO super-datagrams are split for the caller). After Close
	// it returns an error wrapping net.ErrClosed.
	ReadBatch(msgs []Message) (int, error)
	// WriteBatch sends every message in msgs, retrying partial sends. It
	// returns len(msgs) and nil, or the number of messages sent before
	// the first failure and that failure.
	WriteBatch(msgs []Message) (int, error)
	// LocalAddr returns the bound local address.
	LocalAddr() netip.AddrPort
	// BatchSize is the number of messages one syscall moves at most; a
	// good length for the msgs slices. It never changes.
	BatchSize() int
	// Close closes the endpoint and unblocks ReadBatch.
	Close() error
}

// Implementation constants.
const (
	// DefaultBatchSize is Config.BatchSize's default (wireguard-go uses
	// 128; 64 keeps the GRO receive buffers at 4 MiB per socket).
	DefaultBatchSize = 64
	// MaxBatchSize bounds Config.BatchSize (the kernel's UIO_MAXIOV caps
	// the sendmmsg/recvmmsg vector length at 1024).
	MaxBatchSize = 1024
	// DefaultSocketBuffer is the default SO_RCVBUF/SO_SNDBUF request.
	DefaultSocketBuffer = 8 << 20
	// DefaultBusyPollSpin is how long a busy-polling ReadBatch spins
	// before parking in the netpoller.
	DefaultBusyPollSpin = 50 * time.Microsecond
	// maxGSOSegments is the kernel's UDP_MAX_SEGMENTS.
	maxGSOSegments = 64
	// maxDatagram is the largest UDP payload that fits an IPv4 packet;
	// it also bounds one GSO super-datagram and sizes GRO buffers.
	maxDatagram = 65535 - 20 - 8
	// groBufSize is the size of one GRO receive buffer.
	groBufSize = 65536
)

// Config configures a Socket. The zero value gives the defaults.
type Config struct {
	// BatchSize is the number of datagrams moved per syscall
	// (default DefaultBatchSize, at most MaxBatchSize).
	BatchSize int
	// ReadBuffer and WriteBuffer are the requested SO_RCVBUF/SO_SNDBUF
	// sizes in bytes (default DefaultSocketBuffer). As root the *FORCE
	// variants are tried first, so net.core.[rw]mem_max does not clamp.
	ReadBuffer, WriteBuffer int
	// DisableGSO turns off UDP GSO coalescing on send.
	DisableGSO bool
	// IPv4GSO allows GSO on an IPv4 socket for non-loopback
	// destinations too. It is off by default because a segmented GSO
	// super-datagram carries IP IDs 0, 1, 2, ... (measured on Linux 6.18
	// over veth), while the RoCEv2 ICRC covers the IP ID and the sender
	// computes it for ID 0: a peer that verifies IPv4 ICRCs, such as
	// kernel rxe, drops every segment but the first. Peers that read
	// through UDP sockets (softib) never see the ID. IPv6 has no ID and
	// loopback destinations never leave the host, so both always use
	// GSO unless DisableGSO is set.
	IPv4GSO bool
	// DisableGRO turns off UDP GRO on receive. Without GRO, ReadBatch
	// receives straight into the caller's buffers (no copy).
	DisableGRO bool
	// TOS is the IPv4 TOS byte or IPv6 traffic class; 0 leaves the
	// kernel default.
	TOS int
	// TTL is the IPv4 TTL or IPv6 unicast hop limit; 0 leaves the kernel
	// default.
	TTL int
	// BusyPoll makes ReadBatch spin on non-blocking recvmmsg (yielding
	// with runtime.Gosched) instead of parking in the netpoller, for the
	// lowest latency. It spins for at most BusyPollSpin without data,
	// then parks until the socket is readable, and spins again after.
	// It pays off only with idle cores: on a 2-core machine under load
	// (loadavg 5-14) 8-byte ping-pong was 2-4x slower than the netpoller.
	BusyPoll bool
	// BusyPollSpin bounds one busy-poll spin (default DefaultBusyPollSpin).
	BusyPollSpin time.Duration
	// RecvTOS makes reads report each datagram's IPv4 TOS byte or IPv6
	// traffic class in Message.TOS (IP_RECVTOS / IPV6_RECVTCLASS control
	// messages), for ECN. Linux only: Listen fails elsewhere.
	RecvTOS bool
}

// withDefaults returns a copy of c with zero fields defaulted and values
// clamped to their valid ranges.
func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.BatchSize <= 0 {
		d.BatchSize = DefaultBatchSize
	}
	d.BatchSize = min(d.BatchSize, MaxBatchSize)
	if d.ReadBuffer <= 0 {
		d.ReadBuffer = DefaultSocketBuffer
	}
	if d.WriteBuffer <= 0 {
		d.WriteBuffer = DefaultSocketBuffer
	}
	if d.BusyPollSpin <= 0 {
		d.BusyPollSpin = DefaultBusyPollSpin
	}
	d.TOS = max(0, min(d.TOS, 255))
	d.TTL = max(0, min(d.TTL, 255))
	return d
}

// Stats counts socket events. All fields are safe to read at any time
// (stats.Snapshot(&s.Stats) gives a map by name).
type Stats struct {
	RxDatagrams  stats.Counter // datagrams handed to callers
	RxSyscalls   stats.Counter // successful recvmmsg calls
	RxGROSplit   stats.Counter // GRO super-datagrams split up
	RxTruncated  stats.Counter // datagrams larger than the caller's buffer (or with truncated control data), dropped
	TxDatagrams  stats.Counter // datagrams sent
	TxSyscalls   stats.Counter // successful sendmmsg calls
	TxGSOBatches stats.Counter // GSO super-datagrams sent
	TxGSORetry   stats.Counter // GSO sends that failed and were retried without
}

// ErrGSODisabled is matched (errors.Is) by a *GSODisabledError.
var ErrGSODisabled = errors.New("udp: GSO disabled")

// GSODisabledError records why UDP GSO was switched off on a socket: a
// GSO send failed with Cause and the same datagrams then went out without
// GSO. Socket.GSODisabled returns it.
type GSODisabledError struct {
	Local netip.AddrPort // socket address
	Cause error          // the error of the failed GSO send
}

func (e *GSODisabledError) Error() string {
	return fmt.Sprintf("udp %v: GSO disabled after send error: %v", e.Local, e.Cause)
}

// Unwrap returns the cause.
func (e *GSODisabledError) Unwrap() error { return e.Cause }

// Is reports whether target is ErrGSODisabled.
func (e *GSODisabledError) Is(target error) bool { return target == ErrGSODisabled }

// ErrAddrFamily is returned by WriteBatch for a destination whose address
// family the socket cannot reach (an IPv6 destination on an IPv4 socket or
// the reverse; IPv6 sockets are IPV6_V6ONLY).
var ErrAddrFamily = errors.New("udp: destination address family does not match socket")

// ErrMessageSize is returned by WriteBatch for a Message whose N is
// negative or larger than cap(Buf).
var ErrMessageSize = errors.New("udp: message length out of range")

// closedError wraps net.ErrClosed for operations on a closed socket.
var errClosed = fmt.Errorf("udp: socket closed: %w", net.ErrClosed)
