package roce

import (
	"encoding/binary"

	"softib/internal/seqnum"
)

// Header sizes in bytes (IBTA Vol 1 §9.2 and §9.3; RoCEv2 Annex A17).
const (
	BTHSize          = 12
	RDETHSize        = 4
	DETHSize         = 8
	RETHSize         = 16
	AtomicETHSize    = 28
	AETHSize         = 4
	AtomicAckETHSize = 8
	ImmDtSize        = 4
	IETHSize         = 4
	ICRCSize         = 4
)

// BTH is a view of the 12-byte Base Transport Header (IBTA Vol 1 §9.2).
// Accessors assume len >= BTHSize; Parse checks that before handing one out.
type BTH []byte

const (
	bthOpcode   = 0
	bthFlags    = 1 // SE(7) M(6) PadCnt(5:4) TVer(3:0)
	bthPKey     = 2
	bthResv8a   = 4 // FECN(7) BECN(6) reserved(5:0)
	bthDestQP   = 4 // 32-bit word whose low 24 bits are DestQP
	bthAckReq   = 8 // AckReq(7) reserved(6:0)
	bthPSN      = 8 // 32-bit word whose low 24 bits are the PSN
	flagSE      = 0x80
	flagMigReq  = 0x40
	flagFECN    = 0x80
	flagBECN    = 0x40
	flagAckReq  = 0x80
	mask24      = 0x00FFFFFF
	padCntShift = 4
)

// BTHFields holds the values of a BTH for Encode. Reserved bits are always
// encoded as zero.
type BTHFields struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8 // 0..3
	TVer   uint8 // transport header version, 0 for IBA
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32 // 24 bits
	AckReq bool
	PSN    seqnum.PSN
}

// Opcode returns the BTH OpCode field.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SetOpcode sets the BTH OpCode field.
func (b BTH) SetOpcode(op Opcode) { b[bthOpcode] = byte(op) }

// SE returns the Solicited Event bit.
func (b BTH) SE() bool { return b[bthFlags]&flagSE != 0 }

// SetSE sets the Solicited Event bit.
func (b BTH) SetSE(v bool) { setBit(&b[bthFlags], flagSE, v) }

// MigReq returns the M (migration request) bit.
func (b BTH) MigReq() bool { return b[bthFlags]&flagMigReq != 0 }

// SetMigReq sets the M (migration request) bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], flagMigReq, v) }

// PadCnt returns the number of pad bytes after the payload (0..3).
func (b BTH) PadCnt() int { return int(b[bthFlags]>>padCntShift) & 3 }

// SetPadCnt sets the PadCnt field; n is taken modulo 4.
func (b BTH) SetPadCnt(n int) {
	b[bthFlags] = b[bthFlags]&^0x30 | byte(n&3)<<padCntShift
}

// TVer returns the transport header version (0 for IBA; rxe drops others).
func (b BTH) TVer() uint8 { return b[bthFlags] & 0x0F }

// SetTVer sets the transport header version.
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&0xF0 | v&0x0F }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// SetPKey sets the partition key.
func (b BTH) SetPKey(v uint16) { binary.BigEndian.PutUint16(b[bthPKey:], v) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthResv8a]&flagFECN != 0 }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthResv8a], flagFECN, v) }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthResv8a]&flagBECN != 0 }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthResv8a], flagBECN, v) }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthDestQP:]) & mask24 }

// SetDestQP sets the 24-bit destination QP, preserving FECN/BECN/reserved.
func (b BTH) SetDestQP(qpn uint32) { set24(b[bthDestQP:], qpn) }

// AckReq returns the A (acknowledge request) bit.
func (b BTH) AckReq() bool { return b[bthAckReq]&flagAckReq != 0 }

// SetAckReq sets the A (acknowledge request) bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAckReq], flagAckReq, v) }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() seqnum.PSN { return seqnum.PSN(binary.BigEndian.Uint32(b[bthPSN:]) & mask24) }

// SetPSN sets the 24-bit PSN, preserving the AckReq and reserved bits.
func (b BTH) SetPSN(p seqnum.PSN) { set24(b[bthPSN:], uint32(p)) }

// Encode writes all of f into b, zeroing reserved bits.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHSize-1]
	b[0] = byte(f.Opcode)
	fl := f.PadCnt&3<<padCntShift | f.TVer&0x0F
	if f.SE {
		fl |= flagSE
	}
	if f.MigReq {
		fl |= flagMigReq
	}
	b[1] = fl
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	w := f.DestQP & mask24
	if f.FECN {
		w |= flagFECN << 24
	}
	if f.BECN {
		w |= flagBECN << 24
	}
	binary.BigEndian.PutUint32(b[4:], w)
	w = uint32(f.PSN) & mask24
	if f.AckReq {
		w |= flagAckReq << 24
	}
	binary.BigEndian.PutUint32(b[8:], w)
}

// Fields returns the decoded BTH.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: uint8(b.PadCnt()),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(),
		DestQP: b.DestQP(), AckReq: b.AckReq(), PSN: b.PSN(),
	}
}

// RDETH is a view of the 4-byte Reliable Datagram Extended Transport Header
// (IBTA Vol 1 §9.3.1). rxe does not implement RD; the view exists so that
// RD opcodes parse.
type RDETH []byte

// EEContext returns the 24-bit end-to-end context.
func (h RDETH) EEContext() uint32 { return binary.BigEndian.Uint32(h[0:]) & mask24 }

// SetEEContext sets the 24-bit EE context, preserving the reserved byte.
func (h RDETH) SetEEContext(v uint32) { set24(h[0:], v) }

// Encode writes the EE context and zeroes the reserved byte.
func (h RDETH) Encode(ee uint32) { binary.BigEndian.PutUint32(h[0:], ee&mask24) }

// DETH is a view of the 8-byte Datagram Extended Transport Header (IBTA Vol 1
// §9.3.2), carried by UD (and RD) requests.
type DETH []byte

// DETHFields holds the values of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// QKey returns the queue key.
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h[0:]) }

// SetQKey sets the queue key.
func (h DETH) SetQKey(v uint32) { binary.BigEndian.PutUint32(h[0:], v) }

// SrcQP returns the 24-bit source QP number.
func (h DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(h[4:]) & mask24 }

// SetSrcQP sets the 24-bit source QP, preserving the reserved byte.
func (h DETH) SetSrcQP(v uint32) { set24(h[4:], v) }

// Encode writes f into h, zeroing the reserved byte.
func (h DETH) Encode(f *DETHFields) {
	_ = h[DETHSize-1]
	binary.BigEndian.PutUint32(h[0:], f.QKey)
	binary.BigEndian.PutUint32(h[4:], f.SrcQP&mask24)
}

// Fields returns the decoded DETH.
func (h DETH) Fields() DETHFields { return DETHFields{QKey: h.QKey(), SrcQP: h.SrcQP()} }

// RETH is a view of the 16-byte RDMA Extended Transport Header (IBTA Vol 1
// §9.3.3), carried by RDMA WRITE FIRST/ONLY and RDMA READ requests.
type RETH []byte

// RETHFields holds the values of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// VA returns the remote virtual address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// SetVA sets the remote virtual address.
func (h RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// RKey returns the remote key.
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SetRKey sets the remote key.
func (h RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// DMALen returns the DMA length of the whole RDMA operation.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// SetDMALen sets the DMA length.
func (h RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(h[12:], v) }

// Encode writes f into h.
func (h RETH) Encode(f *RETHFields) {
	_ = h[RETHSize-1]
	binary.BigEndian.PutUint64(h[0:], f.VA)
	binary.BigEndian.PutUint32(h[8:], f.RKey)
	binary.BigEndian.PutUint32(h[12:], f.DMALen)
}

// Fields returns the decoded RETH.
func (h RETH) Fields() RETHFields {
	return RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()}
}

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header (IBTA
// Vol 1 §9.3.4), carried by COMPARE_SWAP and FETCH_ADD.
type AtomicETH []byte

// AtomicETHFields holds the values of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap data (compare & swap) or add data (fetch & add)
	Compare uint64
}

// VA returns the remote virtual address (must be 8-byte aligned).
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// SetVA sets the remote virtual address.
func (h AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// RKey returns the remote key.
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SetRKey sets the remote key.
func (h AtomicETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[8:], v) }

// SwapAdd returns the swap (compare & swap) or add (fetch & add) operand.
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// SetSwapAdd sets the swap or add operand.
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }

// Compare returns the compare operand (compare & swap only).
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// SetCompare sets the compare operand.
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// Encode writes f into h.
func (h AtomicETH) Encode(f *AtomicETHFields) {
	_ = h[AtomicETHSize-1]
	binary.BigEndian.PutUint64(h[0:], f.VA)
	binary.BigEndian.PutUint32(h[8:], f.RKey)
	binary.BigEndian.PutUint64(h[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(h[20:], f.Compare)
}

// Fields returns the decoded AtomicETH.
func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// AETH is a view of the 4-byte ACK Extended Transport Header (IBTA Vol 1
// §9.3.5), carried by ACKs and RDMA READ responses.
type AETH []byte

// AETHFields holds the values of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      seqnum.MSN
}

// Syndrome returns the ACK/NAK syndrome byte (see Syndrome).
func (h AETH) Syndrome() Syndrome { return Syndrome(h[0]) }

// SetSyndrome sets the syndrome byte.
func (h AETH) SetSyndrome(s Syndrome) { h[0] = byte(s) }

// MSN returns the 24-bit message sequence number.
func (h AETH) MSN() seqnum.MSN { return seqnum.MSN(binary.BigEndian.Uint32(h[0:]) & mask24) }

// SetMSN sets the 24-bit MSN, preserving the syndrome.
func (h AETH) SetMSN(m seqnum.MSN) { set24(h[0:], uint32(m)) }

// Encode writes f into h.
func (h AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(h[0:], uint32(f.Syndrome)<<24|uint32(f.MSN)&mask24)
}

// Fields returns the decoded AETH.
func (h AETH) Fields() AETHFields { return AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()} }

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header
// (IBTA Vol 1 §9.3.6): the original remote data before the atomic.
type AtomicAckETH []byte

// OrigData returns the original remote data.
func (h AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// SetOrigData sets the original remote data.
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h[0:], v) }

// ImmDt is a view of the 4-byte Immediate Data header (IBTA Vol 1 §9.3.7).
// The value is opaque: verbs carries it as the same four bytes (a __be32),
// so Value reads it big-endian and a round trip preserves the bytes.
type ImmDt []byte

// Value returns the immediate data read big-endian.
func (h ImmDt) Value() uint32 { return binary.BigEndian.Uint32(h[0:]) }

// SetValue sets the immediate data, written big-endian.
func (h ImmDt) SetValue(v uint32) { binary.BigEndian.PutUint32(h[0:], v) }

// IETH is a view of the 4-byte Invalidate Extended Transport Header (IBTA
// Vol 1 §9.3.8): the R_Key the responder invalidates.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h[0:]) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(h[0:], v) }

// set24 writes the low 24 bits of v into the big-endian word at b, keeping
// the top byte (flags or reserved bits that share the word).
func set24(b []byte, v uint32) {
	_ = b[3]
	b[1] = byte(v >> 16)
	b[2] = byte(v >> 8)
	b[3] = byte(v)
}

func setBit(b *byte, bit byte, v bool) {
	if v {
		*b |= bit
	} else {
		*b &^= bit
	}
}
