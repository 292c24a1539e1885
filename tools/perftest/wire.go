package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"softib/verbs"
)

// Out-of-band protocol of perftest without -R (tool-protocols.md §3,
// roce-wire.md §15): every exchange is symmetric, the client writes first
// and then reads, the server reads and then writes.
//
//	version      16 bytes, NUL-padded ASCII ("6.06")
//	sys data     cycle_buffer, cache_line_size: big-endian int32 each
//	MTU          2 bytes ASCII of the ibv_mtu enum ("3\0" for 1024)
//	keys         108-byte (GID) or 59-byte key messages, one per QP
//	reports      size, iters (u64), bw_peak, bw_avg, msgRate (f64), BE
//	close        a key message, then "done\0"

// Version is the perftest version softib announces. Peers at 6.28 or
// later negotiate a host-ABI struct only with peers that announce 6.28 or
// later, so an older version keeps the exchange ABI-free.
const Version = "6.06"

// VersionLen is the size of a version message (MAX_VERSION).
const VersionLen = 16

// MinPeerVersion is the oldest peer perftest talks to.
const MinPeerVersion = 5.70

// Key message sizes including the NUL.
const (
	KeyMsgLen    = 59
	KeyMsgLenGID = 108
)

// DoneMsg ends a connection.
const DoneMsg = "done\x00"

// Errors of the control protocol.
var (
	// ErrBadMessage reports a malformed message from the peer.
	ErrBadMessage = errors.New("perftest: malformed control message")
	// ErrVersion reports a peer too old to talk to.
	ErrVersion = errors.New("perftest: incompatible peer version")
)

// Key is a per-QP key message (struct pingpong_dest on the wire).
type Key struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      verbs.GID
	SRQN     uint32
	// HasGID selects the 108-byte GID format (always used on RoCE).
	HasGID bool
}

// Len returns the message size.
func (k Key) Len() int {
	if k.HasGID {
		return KeyMsgLenGID
	}
	return KeyMsgLen
}

// Append appends the key message.
func (k Key) Append(b []byte) []byte {
	b = fmt.Appendf(b, "%04x:%04x:%06x:%06x:%08x:%016x:", k.LID, k.OutReads, k.QPN&0xffffff, k.PSN&0xffffff, k.RKey, k.VAddr)
	if k.HasGID {
		for _, x := range k.GID {
			b = fmt.Appendf(b, "%02x:", x)
		}
		b = fmt.Appendf(b, "%08x:", k.SRQN)
	} else {
		b = fmt.Appendf(b, "%08x", k.SRQN)
	}
	return append(b, 0)
}

// ParseKey decodes a key message of either format.
func ParseKey(b []byte, withGID bool) (Key, error) {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	f := strings.Split(string(b), ":")
	want := 7
	if withGID {
		want = 6 + 16 + 1 + 1 // the trailing colon leaves an empty field
	}
	if len(f) != want {
		return Key{}, fmt.Errorf("%w: key message %q has %d fields", ErrBadMessage, b, len(f))
	}
	num := func(i int, bits int) (uint64, error) {
		v, err := strconv.ParseUint(f[i], 16, bits)
		if err != nil {
			return 0, fmt.Errorf("%w: field %d of key message %q", ErrBadMessage, i+1, b)
		}
		return v, nil
	}
	var k Key
	var vals [6]uint64
	bits := [6]int{16, 16, 32, 32, 32, 64}
	for i := range vals {
		v, err := num(i, bits[i])
		if err != nil {
			return Key{}, err
		}
		vals[i] = v
	}
	k.LID, k.OutReads = uint16(vals[0]), uint16(vals[1])
	k.QPN, k.PSN, k.RKey, k.VAddr = uint32(vals[2])&0xffffff, uint32(vals[3])&0xffffff, uint32(vals[4]), vals[5]
	srq := 6
	if withGID {
		k.HasGID = true
		for i := range 16 {
			v, err := num(6+i, 8)
			if err != nil {
				return Key{}, err
			}
			k.GID[i] = byte(v)
		}
		srq = 22
		if f[23] != "" {
			return Key{}, fmt.Errorf("%w: key message %q lacks the trailing colon", ErrBadMessage, b)
		}
	}
	v, err := num(srq, 32)
	if err != nil {
		return Key{}, err
	}
	k.SRQN = uint32(v)
	return k, nil
}

// BWReport is a bandwidth result exchanged at the end of BW tests.
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// ReportFieldLen is the size of each report field on the wire.
const ReportFieldLen = 8

// fields returns the five 8-byte big-endian fields.
func (r *BWReport) fields() [5][ReportFieldLen]byte {
	var f [5][ReportFieldLen]byte
	binary.BigEndian.PutUint64(f[0][:], r.Size)
	binary.BigEndian.PutUint64(f[1][:], r.Iters)
	binary.BigEndian.PutUint64(f[2][:], math.Float64bits(r.BWPeak))
	binary.BigEndian.PutUint64(f[3][:], math.Float64bits(r.BWAvg))
	binary.BigEndian.PutUint64(f[4][:], math.Float64bits(r.MsgRate))
	return f
}

// Append appends the five fields (40 bytes) as they appear on the wire.
func (r *BWReport) Append(b []byte) []byte {
	for _, f := range r.fields() {
		b = append(b, f[:]...)
	}
	return b
}

// Len is 40.
func (r *BWReport) Len() int { return 5 * ReportFieldLen }

// ParseBWReport decodes the 40 bytes Append produces.
func ParseBWReport(b []byte) (BWReport, error) {
	if len(b) != 5*ReportFieldLen {
		return BWReport{}, fmt.Errorf("%w: report of %d bytes", ErrBadMessage, len(b))
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(b[i*8:]) }
	return BWReport{Size: u(0), Iters: u(1), BWPeak: math.Float64frombits(u(2)),
		BWAvg: math.Float64frombits(u(3)), MsgRate: math.Float64frombits(u(4))}, nil
}

// VersionMsg returns the 16-byte version message for v.
func VersionMsg(v string) [VersionLen]byte {
	var m [VersionLen]byte
	copy(m[:VersionLen-1], v)
	return m
}

// ParseVersion returns the version number in a version message, as atof
// reads it (leading digits and one dot).
func ParseVersion(m []byte) (string, float64) {
	s := string(m)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		dot = dot || s[end] == '.'
		end++
	}
	v, _ := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	return s, v
}

// MTUMsg returns the 2-byte MTU message: the ibv_mtu enum value in ASCII
// and a NUL.
func MTUMsg(m verbs.MTU) [2]byte { return [2]byte{'0' + byte(m), 0} }

// ParseMTUMsg decodes an MTU message; 0 if it names no valid MTU.
func ParseMTUMsg(b []byte) verbs.MTU {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	if m := verbs.MTU(n); n < 256 && m.Valid() {
		return m
	}
	return 0
}

// Ctrl is a control channel: the TCP connection of perftest, or an RDMA
// CM based one (-R).
type Ctrl interface {
	// Xchg sends my and receives len(rem) bytes into rem: the client
	// writes first and then reads, the server reads and then writes.
	Xchg(my, rem []byte) error
	// Finish ends the channel after the closing handshake (TCP: write
	// "done\0").
	Finish() error
	// Close releases the channel.
	Close() error
}

// TCPCtrl is the TCP control channel.
type TCPCtrl struct {
	conn   net.Conn
	client bool
	// Timeout bounds each exchange step (0 = no bound).
	Timeout time.Duration
}

// NewTCPCtrl wraps a connected TCP connection; client selects the side.
func NewTCPCtrl(conn net.Conn, client bool) *TCPCtrl { return &TCPCtrl{conn: conn, client: client} }

// Xchg implements Ctrl.
func (c *TCPCtrl) Xchg(my, rem []byte) error {
	if c.Timeout > 0 {
		_ = c.conn.SetDeadline(time.Now().Add(c.Timeout))
	} else {
		_ = c.conn.SetDeadline(time.Time{})
	}
	if c.client {
		if _, err := c.conn.Write(my); err != nil {
			return fmt.Errorf("perftest: write to peer: %w", err)
		}
		if _, err := io.ReadFull(c.conn, rem); err != nil {
			return fmt.Errorf("perftest: read from peer: %w", err)
		}
		return nil
	}
	if _, err := io.ReadFull(c.conn, rem); err != nil {
		return fmt.Errorf("perftest: read from peer: %w", err)
	}
	if _, err := c.conn.Write(my); err != nil {
		return fmt.Errorf("perftest: write to peer: %w", err)
	}
	return nil
}

// Finish writes "done\0" and drains the peer's briefly, so that the
// socket closes without a reset.
func (c *TCPCtrl) Finish() error {
	if _, err := c.conn.Write([]byte(DoneMsg)); err != nil {
		return fmt.Errorf("perftest: write done: %w", err)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b [len(DoneMsg)]byte
	_, _ = io.ReadFull(c.conn, b[:])
	return nil
}

// Close implements Ctrl.
func (c *TCPCtrl) Close() error { return c.conn.Close() }

// Proto speaks perftest's control protocol over a Ctrl.
type Proto struct {
	Ctrl Ctrl
	buf  []byte
}

// KeyXchger is a Ctrl that carries key messages in a format of its own
// (perftest -R sends struct pingpong_dest in binary).
type KeyXchger interface {
	XchgKey(my Key) (Key, error)
}

// HandShake exchanges key messages (ctx_hand_shake); the peer's message
// uses the same format as ours.
func (p *Proto) HandShake(my Key) (Key, error) {
	if kx, ok := p.Ctrl.(KeyXchger); ok {
		return kx.XchgKey(my)
	}
	p.buf = my.Append(p.buf[:0])
	rem := make([]byte, my.Len())
	if err := p.Ctrl.Xchg(p.buf, rem); err != nil {
		return Key{}, err
	}
	return ParseKey(rem, my.HasGID)
}

// Versions exchanges version strings and checks the peer's.
func (p *Proto) Versions(mine string) (string, float64, error) {
	m := VersionMsg(mine)
	var rem [VersionLen]byte
	if err := p.Ctrl.Xchg(m[:], rem[:]); err != nil {
		return "", 0, err
	}
	s, v := ParseVersion(rem[:])
	if v < MinPeerVersion {
		return s, v, fmt.Errorf("%w: peer perftest %q is older than %.2f", ErrVersion, s, MinPeerVersion)
	}
	return s, v, nil
}

// SysData exchanges cycle_buffer and cache_line_size (peers ≥ 5.32) and
// returns the maxima of both sides.
func (p *Proto) SysData(remVersion float64, cycleBuffer, cacheLine int) (int, int, error) {
	if remVersion < 5.32 {
		return cycleBuffer, cacheLine, nil
	}
	var my, rem [4]byte
	out := [2]int{cycleBuffer, cacheLine}
	for i := range out {
		binary.BigEndian.PutUint32(my[:], uint32(out[i]))
		if err := p.Ctrl.Xchg(my[:], rem[:]); err != nil {
			return 0, 0, err
		}
		out[i] = max(out[i], int(int32(binary.BigEndian.Uint32(rem[:]))))
	}
	return out[0], out[1], nil
}

// MTU exchanges path MTUs (peers ≥ 5.1) and returns the smaller valid one.
func (p *Proto) MTU(remVersion float64, mine verbs.MTU) (verbs.MTU, error) {
	if remVersion < 5.1 {
		return mine, nil
	}
	m := MTUMsg(mine)
	n := 2
	if remVersion < 5.31 {
		n = 4
	}
	my := make([]byte, n)
	copy(my, m[:])
	rem := make([]byte, n)
	if err := p.Ctrl.Xchg(my, rem); err != nil {
		return 0, err
	}
	if r := ParseMTUMsg(rem); r != 0 && r < mine {
		return r, nil
	}
	return mine, nil
}

// Reports exchanges BW reports (xchg_bw_reports), one field at a time.
func (p *Proto) Reports(remVersion float64, my *BWReport) (BWReport, error) {
	f := my.fields()
	var got [5][ReportFieldLen]byte
	for i := range f {
		mine, rem := f[i][:], got[i][:]
		if i == 1 && remVersion < 5.33 {
			// Old peers send iters as a 4-byte int.
			binary.BigEndian.PutUint32(mine[:4], uint32(my.Iters))
			mine, rem = mine[:4], rem[4:]
		}
		if err := p.Ctrl.Xchg(mine, rem); err != nil {
			return BWReport{}, err
		}
	}
	var all []byte
	for _, g := range got {
		all = append(all, g[:]...)
	}
	return ParseBWReport(all)
}

// Close runs ctx_close_connection: a key handshake, then Ctrl.Finish.
func (p *Proto) Close(my Key) error {
	if _, err := p.HandShake(my); err != nil {
		return err
	}
	return p.Ctrl.Finish()
}
