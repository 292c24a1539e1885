package srp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SRP information unit opcodes (SRP-2, Linux include/scsi/srp.h).
const (
	OpLoginReq = 0x00
	OpTskMgmt  = 0x01
	OpCmd      = 0x02
	OpILogout  = 0x03
	OpLoginRsp = 0xc0
	OpRsp      = 0xc1
	OpLoginRej = 0xc2
	OpTLogout  = 0x80
	OpCredReq  = 0x81
	OpAERReq   = 0x82
	OpCredRsp  = 0x41
	OpAERRsp   = 0x42
)

// Buffer formats (login) and data descriptor formats (SRP_CMD).
const (
	BufFmtDirect   = 1 << 1
	BufFmtIndirect = 1 << 2
	DescNone       = 0
	DescDirect     = 1
	DescIndirect   = 2
	DescImm        = 3
)

// Login reject reasons.
const (
	RejUnableEstablish    = 0x00010000
	RejInsufficientRes    = 0x00010001
	RejITIULenTooLarge    = 0x00010002
	RejUnableAssociate    = 0x00010003 // the target port ID is not ours
	RejUnsupportedDescFmt = 0x00010004
)

// SRP_RSP flags.
const (
	RspFlagRspValid = 1 << 0
	RspFlagSnsValid = 1 << 1
	RspFlagDOUnder  = 1 << 3
	RspFlagDIUnder  = 1 << 5
)

// Task management functions.
const (
	TskAbortTask    = 0x01
	TskAbortTaskSet = 0x02
	TskClearTaskSet = 0x04
	TskLUNReset     = 0x08
	TskClearACA     = 0x40
)

// Fixed sizes.
const (
	LoginReqLen     = 64
	LoginReqRDMALen = 56
	LoginRspLen     = 52
	LoginRejLen     = 32
	CmdLen          = 48
	RspLen          = 36
	TskMgmtLen      = 48
	DescLen         = 16
)

// Errors of the parsers.
var (
	ErrShortIU = errors.New("srp: information unit too short")
	ErrBadIU   = errors.New("srp: malformed information unit")
)

// LoginReqRDMA is a typed view of struct srp_login_req_rdma, the login
// request Linux's ib_srp sends as RDMA CM private data (56 bytes: the
// 64-byte SRP_LOGIN_REQ without its reserved bytes, so that it fits the
// RDMA CM's 56-byte limit).
type LoginReqRDMA []byte

// ParseLoginReqRDMA checks the length and opcode.
func ParseLoginReqRDMA(b []byte) (LoginReqRDMA, error) {
	if len(b) < LoginReqRDMALen {
		return nil, ErrShortIU
	}
	if b[11] != OpLoginReq {
		return nil, fmt.Errorf("%w: login opcode %#x", ErrBadIU, b[11])
	}
	return LoginReqRDMA(b[:LoginReqRDMALen]), nil
}

// Tag is the initiator's opaque tag (echoed).
func (l LoginReqRDMA) Tag() []byte { return l[0:8] }

// BufFmt is the requested buffer formats.
func (l LoginReqRDMA) BufFmt() uint16 { return binary.BigEndian.Uint16(l[8:10]) }

// Flags is req_flags (multichannel action, immediate data request).
func (l LoginReqRDMA) Flags() byte { return l[10] }

// ITIULen is the largest initiator-to-target IU.
func (l LoginReqRDMA) ITIULen() uint32 { return binary.BigEndian.Uint32(l[12:16]) }

// InitiatorPortID and TargetPortID are the 16-byte port identifiers.
func (l LoginReqRDMA) InitiatorPortID() []byte { return l[16:32] }

// TargetPortID is id_ext followed by ioc_guid.
func (l LoginReqRDMA) TargetPortID() []byte { return l[32:48] }

// LoginReq is a typed view of SRP_LOGIN_REQ (struct srp_login_req, 64
// bytes), the login request an initiator sends as IB CM REQ private
// data (SRP-2 §6.2; Linux ib_srp without dest=).
type LoginReq []byte

// ParseLoginReq checks the length and opcode.
func ParseLoginReq(b []byte) (LoginReq, error) {
	if len(b) < LoginReqLen {
		return nil, ErrShortIU
	}
	if b[0] != OpLoginReq {
		return nil, fmt.Errorf("%w: login opcode %#x", ErrBadIU, b[0])
	}
	return LoginReq(b[:LoginReqLen]), nil
}

// Tag is the initiator's opaque tag (echoed).
func (l LoginReq) Tag() []byte { return l[8:16] }

// ITIULen is the largest initiator-to-target IU.
func (l LoginReq) ITIULen() uint32 { return binary.BigEndian.Uint32(l[16:20]) }

// BufFmt is the requested buffer formats.
func (l LoginReq) BufFmt() uint16 { return binary.BigEndian.Uint16(l[24:26]) }

// Flags is req_flags (multichannel action, immediate data request).
func (l LoginReq) Flags() byte { return l[26] }

// InitiatorPortID is the initiator's 16-byte port identifier.
func (l LoginReq) InitiatorPortID() []byte { return l[32:48] }

// TargetPortID is id_ext followed by ioc_guid.
func (l LoginReq) TargetPortID() []byte { return l[48:64] }

// PutLoginReq builds an SRP_LOGIN_REQ (the initiator side, for tests
// and tools).
func PutLoginReq(b []byte, tag []byte, itIU uint32, bufFmt uint16, flags byte, iPort, tPort []byte) []byte {
	b = b[:LoginReqLen]
	clear(b)
	b[0] = OpLoginReq
	copy(b[8:16], tag)
	binary.BigEndian.PutUint32(b[16:], itIU)
	binary.BigEndian.PutUint16(b[24:], bufFmt)
	b[26] = flags
	copy(b[32:48], iPort)
	copy(b[48:64], tPort)
	return b
}

// loginFields are what both login forms carry.
type loginFields struct {
	tag    []byte
	bufFmt uint16
	flags  byte
	itIU   uint32
	tPort  []byte
}

func (l LoginReq) fields() loginFields {
	return loginFields{l.Tag(), l.BufFmt(), l.Flags(), l.ITIULen(), l.TargetPortID()}
}

func (l LoginReqRDMA) fields() loginFields {
	return loginFields{l.Tag(), l.BufFmt(), l.Flags(), l.ITIULen(), l.TargetPortID()}
}

// PutLoginRsp builds an SRP_LOGIN_RSP.
func PutLoginRsp(b []byte, tag []byte, reqLim, maxIT, maxTI uint32, flags byte) []byte {
	b = b[:LoginRspLen]
	clear(b)
	b[0] = OpLoginRsp
	binary.BigEndian.PutUint32(b[4:], reqLim)
	copy(b[8:16], tag)
	binary.BigEndian.PutUint32(b[16:], maxIT)
	binary.BigEndian.PutUint32(b[20:], maxTI)
	binary.BigEndian.PutUint16(b[24:], BufFmtDirect|BufFmtIndirect)
	b[26] = flags
	return b
}

// PutLoginRej builds an SRP_LOGIN_REJ.
func PutLoginRej(b []byte, tag []byte, reason uint32) []byte {
	b = b[:LoginRejLen]
	clear(b)
	b[0] = OpLoginRej
	binary.BigEndian.PutUint32(b[4:], reason)
	copy(b[8:16], tag)
	binary.BigEndian.PutUint16(b[24:], BufFmtDirect|BufFmtIndirect)
	return b
}

// Desc is a direct data buffer descriptor: a remote range.
type Desc struct {
	VA  uint64
	Key uint32
	Len uint32
}

func readDesc(b []byte) Desc {
	return Desc{binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint32(b[8:12]), binary.BigEndian.Uint32(b[12:16])}
}

// Cmd is a parsed SRP_CMD.
type Cmd struct {
	Tag    [8]byte
	LUN    [8]byte
	CDB    []byte // 16 bytes, in the IU
	Out    bool   // data-out (a write); otherwise data-in if Descs
	Descs  []Desc // the data buffer, in order
	Length uint64 // total bytes of Descs (or the indirect total)
	// External is the indirect descriptor table's remote location when
	// the IU holds only part of it (Linux's allow_ext_sg).
	External *Desc
	ExtCount int
}

// ParseCmd parses an SRP_CMD IU into c (reusing c.Descs). Only one
// direction may carry data (bidirectional commands are refused), and
// immediate data is refused: the target does not offer it at login.
func ParseCmd(b []byte, c *Cmd) error {
	if len(b) < CmdLen {
		return ErrShortIU
	}
	if b[0] != OpCmd {
		return fmt.Errorf("%w: opcode %#x", ErrBadIU, b[0])
	}
	copy(c.Tag[:], b[8:16])
	copy(c.LUN[:], b[20:28])
	c.CDB = b[32:48]
	fmtOut, fmtIn := b[5]>>4, b[5]&0xf
	cntOut, cntIn := int(b[6]), int(b[7])
	off := CmdLen + int(b[31]&^3)
	c.Descs, c.Length, c.External, c.ExtCount = c.Descs[:0], 0, nil, 0
	fmtUsed, cnt := fmtIn, cntIn
	c.Out = false
	switch {
	case fmtOut != DescNone && fmtIn != DescNone:
		return fmt.Errorf("%w: bidirectional command", ErrBadIU)
	case fmtOut != DescNone:
		fmtUsed, cnt, c.Out = fmtOut, cntOut, true
	}
	switch fmtUsed {
	case DescNone:
		return nil
	case DescDirect:
		if off+DescLen > len(b) {
			return ErrShortIU
		}
		d := readDesc(b[off:])
		c.Descs = append(c.Descs, d)
		c.Length = uint64(d.Len)
		return nil
	case DescIndirect:
		// struct srp_indirect_buf: table descriptor, total length, then
		// cnt descriptors of the table in the IU.
		if off+DescLen+4 > len(b) {
			return ErrShortIU
		}
		table := readDesc(b[off:])
		total := binary.BigEndian.Uint32(b[off+DescLen:])
		if table.Len%DescLen != 0 || table.Len == 0 {
			return fmt.Errorf("%w: descriptor table of %d bytes", ErrBadIU, table.Len)
		}
		n := int(table.Len / DescLen)
		list := b[off+DescLen+4:]
		if cnt < n {
			// Part of the table is only in the initiator's memory.
			t := table
			c.External, c.ExtCount = &t, n
			c.Length = uint64(total)
			return nil
		}
		if len(list) < n*DescLen {
			return ErrShortIU
		}
		var sum uint64
		for i := range n {
			d := readDesc(list[i*DescLen:])
			c.Descs = append(c.Descs, d)
			sum += uint64(d.Len)
		}
		if sum != uint64(total) {
			return fmt.Errorf("%w: descriptors add to %d, total says %d", ErrBadIU, sum, total)
		}
		c.Length = sum
		return nil
	}
	return fmt.Errorf("%w: descriptor format %d", ErrBadIU, fmtUsed)
}

// ParseDescTable decodes an external descriptor table read from the
// initiator.
func ParseDescTable(b []byte, n int, into []Desc) ([]Desc, uint64) {
	var sum uint64
	for i := 0; i < n && (i+1)*DescLen <= len(b); i++ {
		d := readDesc(b[i*DescLen:])
		into = append(into, d)
		sum += uint64(d.Len)
	}
	return into, sum
}

// PutRsp builds an SRP_RSP with optional response data (TMF) and sense.
func PutRsp(b []byte, tag [8]byte, reqLimDelta uint32, flags, status byte, doRes, diRes uint32, resp, sense []byte) []byte {
	n := RspLen + len(resp) + len(sense)
	b = b[:n]
	clear(b[:RspLen])
	b[0] = OpRsp
	binary.BigEndian.PutUint32(b[4:], reqLimDelta)
	copy(b[8:16], tag[:])
	if len(resp) > 0 {
		flags |= RspFlagRspValid
	}
	if len(sense) > 0 {
		flags |= RspFlagSnsValid
	}
	b[18], b[19] = flags, status
	binary.BigEndian.PutUint32(b[20:], doRes)
	binary.BigEndian.PutUint32(b[24:], diRes)
	binary.BigEndian.PutUint32(b[28:], uint32(len(sense)))
	binary.BigEndian.PutUint32(b[32:], uint32(len(resp)))
	copy(b[RspLen:], resp)
	copy(b[RspLen+len(resp):], sense)
	return b
}

// TskMgmt is a typed view of SRP_TSK_MGMT.
type TskMgmt []byte

// ParseTskMgmt checks the length.
func ParseTskMgmt(b []byte) (TskMgmt, error) {
	if len(b) < TskMgmtLen {
		return nil, ErrShortIU
	}
	return TskMgmt(b[:TskMgmtLen]), nil
}

// Tag is the IU's tag.
func (t TskMgmt) Tag() [8]byte { return [8]byte(t[8:16]) }

// LUN is the logical unit.
func (t TskMgmt) LUN() [8]byte { return [8]byte(t[20:28]) }

// Func is the task management function.
func (t TskMgmt) Func() byte { return t[30] }

// TaskTag is the tag of the task to abort.
func (t TskMgmt) TaskTag() [8]byte { return [8]byte(t[32:40]) }
