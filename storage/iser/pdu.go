package iser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// iSCSI opcodes (RFC 7143 §11.1.1).
const (
	OpNOPOut      = 0x00
	OpSCSICmd     = 0x01
	OpTMFReq      = 0x02
	OpLoginReq    = 0x03
	OpTextReq     = 0x04
	OpDataOut     = 0x05
	OpLogoutReq   = 0x06
	OpNOPIn       = 0x20
	OpSCSIRsp     = 0x21
	OpTMFRsp      = 0x22
	OpLoginRsp    = 0x23
	OpTextRsp     = 0x24
	OpDataIn      = 0x25
	OpLogoutRsp   = 0x26
	OpR2T         = 0x31
	OpAsyncMsg    = 0x32
	OpReject      = 0x3f
	opImmediate   = 0x40
	flagFinal     = 0x80
	flagContinue  = 0x40 // login/text C bit
	flagRead      = 0x40 // SCSI command R bit
	flagWrite     = 0x20 // SCSI command W bit
	flagUnderflow = 0x02 // SCSI response U bit
	flagOverflow  = 0x04 // SCSI response O bit
)

// BHSLen is the length of the basic header segment.
const BHSLen = 48

// Login stages (CSG/NSG).
const (
	StageSecurity    = 0
	StageOperational = 1
	StageFullFeature = 3
)

// Errors of the PDU parsers.
var (
	ErrShortPDU = errors.New("iser: PDU shorter than its headers")
	ErrBadPDU   = errors.New("iser: malformed PDU")
)

// BHS is a typed view of an iSCSI basic header segment (48 bytes).
type BHS []byte

// Opcode is the opcode without the immediate bit.
func (b BHS) Opcode() byte { return b[0] & 0x3f }

// Immediate reports the I bit: the PDU does not advance CmdSN.
func (b BHS) Immediate() bool { return b[0]&opImmediate != 0 }

// Flags is byte 1 (opcode-specific flags).
func (b BHS) Flags() byte { return b[1] }

// AHSLen is the total AHS length in bytes.
func (b BHS) AHSLen() int { return int(b[4]) * 4 }

// DataLen is the data segment length.
func (b BHS) DataLen() int { return int(b[5])<<16 | int(b[6])<<8 | int(b[7]) }

// SetDataLen sets the data segment length.
func (b BHS) SetDataLen(n int) { b[5], b[6], b[7] = byte(n>>16), byte(n>>8), byte(n) }

// LUN is bytes 8..15.
func (b BHS) LUN() [8]byte { return [8]byte(b[8:16]) }

// ITT is the initiator task tag.
func (b BHS) ITT() uint32 { return binary.BigEndian.Uint32(b[16:20]) }

// U32 reads the big-endian word at off (the opcode-specific fields:
// EDTL 20, CmdSN 24, ExpStatSN 28, ...).
func (b BHS) U32(off int) uint32 { return binary.BigEndian.Uint32(b[off : off+4]) }

// PutU32 writes the big-endian word at off.
func (b BHS) PutU32(off int, v uint32) { binary.BigEndian.PutUint32(b[off:off+4], v) }

// CmdSN is bytes 24..27 of an initiator PDU.
func (b BHS) CmdSN() uint32 { return b.U32(24) }

// ExpStatSN is bytes 28..31 of an initiator PDU.
func (b BHS) ExpStatSN() uint32 { return b.U32(28) }

// CDB is a SCSI command's 16-byte CDB field.
func (b BHS) CDB() []byte { return b[32:48] }

// EDTL is a SCSI command's expected data transfer length.
func (b BHS) EDTL() uint32 { return b.U32(20) }

// CSG and NSG are a login PDU's current and next stage.
func (b BHS) CSG() int { return int(b[1]>>2) & 3 }

// NSG is a login PDU's next stage.
func (b BHS) NSG() int { return int(b[1]) & 3 }

// ISID is a login PDU's initiator session ID.
func (b BHS) ISID() [6]byte { return [6]byte(b[8:14]) }

// TSIH is a login PDU's target session identifying handle.
func (b BHS) TSIH() uint16 { return binary.BigEndian.Uint16(b[14:16]) }

// iSER header (RFC 7145 §9.2, Linux's struct iser_ctrl): 28 bytes in
// front of every iSCSI PDU in a SEND.
const (
	HdrLen          = 28
	HeadersLen      = HdrLen + BHSLen
	iserCtrl        = 0x10 // opcode: iSCSI control-type PDU
	iserHello       = 0x20
	iserHelloReply  = 0x30
	iserWSV         = 0x08 // write STag valid
	iserRSV         = 0x04 // read STag valid
	cmZBVANotSup    = 0x80 // CM private data: zero-based VA not used
	cmSendWInvNoSup = 0x40 // CM private data: no send with invalidate
	CMHdrLen        = 4
)

// Hdr is a typed view of the iSER header.
type Hdr []byte

// Opcode is the iSER opcode (high nibble of byte 0).
func (h Hdr) Opcode() byte { return h[0] & 0xf0 }

// WriteSTag is valid when WSV: the initiator's data-out buffer, which
// the target reads with RDMA READ.
func (h Hdr) WriteSTag() (stag uint32, va uint64, ok bool) {
	return binary.BigEndian.Uint32(h[4:8]), binary.BigEndian.Uint64(h[8:16]), h[0]&iserWSV != 0
}

// ReadSTag is valid when RSV: the initiator's data-in buffer, which the
// target fills with RDMA WRITE.
func (h Hdr) ReadSTag() (stag uint32, va uint64, ok bool) {
	return binary.BigEndian.Uint32(h[16:20]), binary.BigEndian.Uint64(h[20:28]), h[0]&iserRSV != 0
}

// PutCtrl writes a control-type iSER header, with the STags the flags
// select.
func (h Hdr) PutCtrl(wstag uint32, wva uint64, rstag uint32, rva uint64) {
	clear(h[:HdrLen])
	h[0] = iserCtrl
	if wstag != 0 {
		h[0] |= iserWSV
		binary.BigEndian.PutUint32(h[4:8], wstag)
		binary.BigEndian.PutUint64(h[8:16], wva)
	}
	if rstag != 0 {
		h[0] |= iserRSV
		binary.BigEndian.PutUint32(h[16:20], rstag)
		binary.BigEndian.PutUint64(h[20:28], rva)
	}
}

// Message is one received iSER message split into its parts.
type Message struct {
	Hdr  Hdr
	BHS  BHS
	Data []byte
}

// ParseMessage splits a received SEND payload into the iSER header, the
// BHS and the data segment (AHS is skipped), checking every length.
func ParseMessage(b []byte) (Message, error) {
	if len(b) < HeadersLen {
		return Message{}, ErrShortPDU
	}
	m := Message{Hdr: Hdr(b[:HdrLen]), BHS: BHS(b[HdrLen:HeadersLen])}
	if op := m.Hdr.Opcode(); op != iserCtrl {
		return Message{}, fmt.Errorf("%w: iSER opcode %#x", ErrBadPDU, op)
	}
	rest := b[HeadersLen:]
	ahs := m.BHS.AHSLen()
	if ahs > len(rest) {
		return Message{}, fmt.Errorf("%w: AHS of %d bytes in %d", ErrBadPDU, ahs, len(rest))
	}
	rest = rest[ahs:]
	dl := m.BHS.DataLen()
	if dl > len(rest) {
		return Message{}, fmt.Errorf("%w: data segment of %d bytes in %d", ErrBadPDU, dl, len(rest))
	}
	m.Data = rest[:dl]
	return m, nil
}

// KV is one text key=value pair.
type KV struct{ Key, Value string }

// ParseText splits a login/text data segment into key=value pairs
// (RFC 7143 §6.1: NUL-terminated, UTF-8). It rejects a pair without '='
// and an over-long key.
func ParseText(b []byte) ([]KV, error) {
	var kvs []KV
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		s := string(b[:i])
		if i < len(b) {
			i++
		}
		b = b[i:]
		if s == "" {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" || len(k) > 63 {
			return nil, fmt.Errorf("%w: text %q", ErrBadPDU, s)
		}
		kvs = append(kvs, KV{k, v})
	}
	return kvs, nil
}

// AppendText appends key=value\0 pairs.
func AppendText(b []byte, kvs ...KV) []byte {
	for _, kv := range kvs {
		b = append(append(append(append(b, kv.Key...), '='), kv.Value...), 0)
	}
	return b
}
