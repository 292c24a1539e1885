package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"softib/verbs"
)

// DestLen is the size of the connection message of ibv_rc_pingpong and
// ibv_ud_pingpong: "%04x:%06x:%06x:%s" (LID, QPN, PSN, 32 hex digits of
// GID in wire order) and a terminating NUL (tool-protocols.md §1.1).
const DestLen = 52

// DoneMsg is what the client sends after reading the server's message:
// "done" with its NUL.
const DoneMsg = "done\x00"

// ErrBadMessage reports a malformed connection message from the peer.
var ErrBadMessage = errors.New("pingpong: malformed connection message")

// Dest is a pingpong endpoint as exchanged over TCP.
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	// GID is zero when the peer runs without -g.
	GID verbs.GID
}

// Len returns DestLen.
func (Dest) Len() int { return DestLen }

// Append appends the 52-byte message for d.
func (d Dest) Append(b []byte) []byte {
	b = fmt.Appendf(b, "%04x:%06x:%06x:", d.LID, d.QPN&0xffffff, d.PSN&0xffffff)
	b = hex.AppendEncode(b, d.GID[:])
	return append(b, 0)
}

// ParseDest decodes a connection message as rdma-core reads it: three hex
// fields separated by colons, then 32 hex digits of GID. Trailing bytes
// after the GID (the NUL) are ignored.
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	var f [3]uint64
	rest := b
	for i := range f {
		j := indexByte(rest, ':')
		if j <= 0 {
			return Dest{}, fmt.Errorf("%w: %q", ErrBadMessage, printable(b))
		}
		v, err := strconv.ParseUint(string(rest[:j]), 16, 32)
		if err != nil {
			return Dest{}, fmt.Errorf("%w: field %d of %q", ErrBadMessage, i+1, printable(b))
		}
		f[i] = v
		rest = rest[j+1:]
	}
	if len(rest) < 32 {
		return Dest{}, fmt.Errorf("%w: short GID in %q", ErrBadMessage, printable(b))
	}
	if _, err := hex.Decode(d.GID[:], rest[:32]); err != nil {
		return Dest{}, fmt.Errorf("%w: GID in %q", ErrBadMessage, printable(b))
	}
	if f[0] > 0xffff {
		return Dest{}, fmt.Errorf("%w: LID %#x", ErrBadMessage, f[0])
	}
	d.LID, d.QPN, d.PSN = uint16(f[0]), uint32(f[1])&0xffffff, uint32(f[2])&0xffffff
	return d, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
		if x == 0 {
			return -1
		}
	}
	return -1
}

func printable(b []byte) string {
	if i := indexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// ExchangeTimeout bounds each step of the TCP exchange once connected.
const ExchangeTimeout = 30 * time.Second

// ClientExchange runs the client side of the exchange on conn: send our
// message, read the server's, send "done". The caller closes conn.
func ClientExchange(conn net.Conn, my Dest) (Dest, error) {
	_ = conn.SetDeadline(time.Now().Add(ExchangeTimeout))
	if _, err := conn.Write(my.Append(make([]byte, 0, DestLen))); err != nil {
		return Dest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	var msg [DestLen]byte
	if _, err := io.ReadFull(conn, msg[:]); err != nil {
		return Dest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if _, err := conn.Write([]byte(DoneMsg)); err != nil {
		return Dest{}, fmt.Errorf("couldn't send done: %w", err)
	}
	return ParseDest(msg[:])
}

// ServerExchange runs the server side on conn: read the client's message,
// call connect (which brings the QP to RTS, as rdma-core does before it
// replies), send our message and read the client's "done" leniently (up
// to 5 bytes or EOF). The caller closes conn.
func ServerExchange(conn net.Conn, my Dest, connect func(rem Dest) error) (Dest, error) {
	_ = conn.SetDeadline(time.Now().Add(ExchangeTimeout))
	var msg [DestLen]byte
	if _, err := io.ReadFull(conn, msg[:]); err != nil {
		return Dest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := ParseDest(msg[:])
	if err != nil {
		return Dest{}, err
	}
	if err := connect(rem); err != nil {
		return Dest{}, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if _, err := conn.Write(my.Append(make([]byte, 0, DestLen))); err != nil {
		return Dest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	var done [len(DoneMsg)]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return Dest{}, fmt.Errorf("couldn't read done: %w", err)
	}
	return rem, nil
}
