package rping

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// InfoLen is the size of an info message (struct rping_rdma_info).
const InfoLen = 16

// Sizes and defaults of rping.
const (
	DefaultPort = 7174
	DefaultSize = 64
	// MinSize is the smallest -S: room for "rdma-ping-2147483647: "
	// (sizeof of the stringified INT_MAX plus sizeof of the format).
	MinSize = 26
	// MaxSize is the largest -S (RPING_BUFSIZE - 1).
	MaxSize = 64*1024 - 1
	// SQDepth is the send queue depth (RPING_SQ_DEPTH).
	SQDepth = 16
	// RQDepth is the receive queue depth; one receive is kept posted.
	RQDepth = 2
)

// ErrBadInfo reports an info message of the wrong size.
var ErrBadInfo = errors.New("rping: bad info message")

// Info is the message every rping SEND carries: where a buffer is and
// how to reach it. All fields travel big-endian.
type Info struct {
	Buf  uint64 // buffer address
	RKey uint32
	Size uint32
}

// Len returns InfoLen.
func (Info) Len() int { return InfoLen }

// Append appends the 16-byte encoding.
func (m Info) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, m.Buf)
	b = binary.BigEndian.AppendUint32(b, m.RKey)
	return binary.BigEndian.AppendUint32(b, m.Size)
}

// ParseInfo decodes an info message; rping accepts exactly 16 bytes.
func ParseInfo(b []byte) (Info, error) {
	if len(b) != InfoLen {
		return Info{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadInfo, len(b), InfoLen)
	}
	return Info{Buf: binary.BigEndian.Uint64(b), RKey: binary.BigEndian.Uint32(b[8:]), Size: binary.BigEndian.Uint32(b[12:])}, nil
}

// First and last characters of the rotating fill, and where each
// iteration's fill starts relative to the previous one.
const (
	fillFirst = 'A' // 65
	fillLast  = 'z' // 122
)

// Pattern produces the ping data of successive iterations: the text
// "rdma-ping-N: ", then characters cycling through 'A'..'z' from a start
// character that advances by one each iteration, and a final NUL.
type Pattern struct {
	start byte
}

// Fill writes iteration ping's data into buf (the whole buffer) and
// advances the start character.
func (p *Pattern) Fill(buf []byte, ping int) {
	if p.start == 0 {
		p.start = fillFirst
	}
	var hb [32]byte
	head := append(hb[:0], "rdma-ping-"...)
	head = strconv.AppendInt(head, int64(ping), 10)
	head = append(head, ": "...)
	n := copy(buf, head)
	c := p.start
	for i := n; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > fillLast {
			c = fillFirst
		}
	}
	p.start++
	if p.start > fillLast {
		p.start = fillFirst
	}
	if len(buf) > 0 {
		buf[len(buf)-1] = 0
	}
}

// cString returns b up to its first NUL.
func cString(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
