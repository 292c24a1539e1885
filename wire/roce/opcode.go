package roce

import "strconv"

// Opcode is the BTH OpCode: a transport base (RC 0x00, UC 0x20, RD 0x40,
// UD 0x60, CNP 0x80) plus an operation (IBTA Vol 1 §9.2.1, Table 38).
type Opcode uint8

// Transport bases: the top three bits of an opcode.
const (
	TransportRC  Opcode = 0x00
	TransportUC  Opcode = 0x20
	TransportRD  Opcode = 0x40
	TransportUD  Opcode = 0x60
	TransportCNP Opcode = 0x80
)

// Operations: the low five bits of an opcode, shared by the transports.
const (
	opSendFirst          = 0x00
	opSendMiddle         = 0x01
	opSendLast           = 0x02
	opSendLastImm        = 0x03
	opSendOnly           = 0x04
	opSendOnlyImm        = 0x05
	opWriteFirst         = 0x06
	opWriteMiddle        = 0x07
	opWriteLast          = 0x08
	opWriteLastImm       = 0x09
	opWriteOnly          = 0x0A
	opWriteOnlyImm       = 0x0B
	opReadRequest        = 0x0C
	opReadResponseFirst  = 0x0D
	opReadResponseMiddle = 0x0E
	opReadResponseLast   = 0x0F
	opReadResponseOnly   = 0x10
	opAck                = 0x11
	opAtomicAck          = 0x12
	opCompareSwap        = 0x13
	opFetchAdd           = 0x14
	opResync             = 0x15
	opSendLastInv        = 0x16
	opSendOnlyInv        = 0x17
)

// RC opcodes.
const (
	RCSendFirst          = TransportRC | opSendFirst
	RCSendMiddle         = TransportRC | opSendMiddle
	RCSendLast           = TransportRC | opSendLast
	RCSendLastImm        = TransportRC | opSendLastImm
	RCSendOnly           = TransportRC | opSendOnly
	RCSendOnlyImm        = TransportRC | opSendOnlyImm
	RCWriteFirst         = TransportRC | opWriteFirst
	RCWriteMiddle        = TransportRC | opWriteMiddle
	RCWriteLast          = TransportRC | opWriteLast
	RCWriteLastImm       = TransportRC | opWriteLastImm
	RCWriteOnly          = TransportRC | opWriteOnly
	RCWriteOnlyImm       = TransportRC | opWriteOnlyImm
	RCReadRequest        = TransportRC | opReadRequest
	RCReadResponseFirst  = TransportRC | opReadResponseFirst
	RCReadResponseMiddle = TransportRC | opReadResponseMiddle
	RCReadResponseLast   = TransportRC | opReadResponseLast
	RCReadResponseOnly   = TransportRC | opReadResponseOnly
	RCAck                = TransportRC | opAck
	RCAtomicAck          = TransportRC | opAtomicAck
	RCCompareSwap        = TransportRC | opCompareSwap
	RCFetchAdd           = TransportRC | opFetchAdd
	RCSendLastInv        = TransportRC | opSendLastInv
	RCSendOnlyInv        = TransportRC | opSendOnlyInv
)

// UC opcodes.
const (
	UCSendFirst    = TransportUC | opSendFirst
	UCSendMiddle   = TransportUC | opSendMiddle
	UCSendLast     = TransportUC | opSendLast
	UCSendLastImm  = TransportUC | opSendLastImm
	UCSendOnly     = TransportUC | opSendOnly
	UCSendOnlyImm  = TransportUC | opSendOnlyImm
	UCWriteFirst   = TransportUC | opWriteFirst
	UCWriteMiddle  = TransportUC | opWriteMiddle
	UCWriteLast    = TransportUC | opWriteLast
	UCWriteLastImm = TransportUC | opWriteLastImm
	UCWriteOnly    = TransportUC | opWriteOnly
	UCWriteOnlyImm = TransportUC | opWriteOnlyImm
)

// RD opcodes. rxe (and softib) do not implement RD; they parse so that
// captures decode and the receiver can count them as a transport mismatch.
const (
	RDSendFirst          = TransportRD | opSendFirst
	RDSendMiddle         = TransportRD | opSendMiddle
	RDSendLast           = TransportRD | opSendLast
	RDSendLastImm        = TransportRD | opSendLastImm
	RDSendOnly           = TransportRD | opSendOnly
	RDSendOnlyImm        = TransportRD | opSendOnlyImm
	RDWriteFirst         = TransportRD | opWriteFirst
	RDWriteMiddle        = TransportRD | opWriteMiddle
	RDWriteLast          = TransportRD | opWriteLast
	RDWriteLastImm       = TransportRD | opWriteLastImm
	RDWriteOnly          = TransportRD | opWriteOnly
	RDWriteOnlyImm       = TransportRD | opWriteOnlyImm
	RDReadRequest        = TransportRD | opReadRequest
	RDReadResponseFirst  = TransportRD | opReadResponseFirst
	RDReadResponseMiddle = TransportRD | opReadResponseMiddle
	RDReadResponseLast   = TransportRD | opReadResponseLast
	RDReadResponseOnly   = TransportRD | opReadResponseOnly
	RDAck                = TransportRD | opAck
	RDAtomicAck          = TransportRD | opAtomicAck
	RDCompareSwap        = TransportRD | opCompareSwap
	RDFetchAdd           = TransportRD | opFetchAdd
	RDResync             = TransportRD | opResync
)

// UD opcodes.
const (
	UDSendOnly    = TransportUD | opSendOnly
	UDSendOnlyImm = TransportUD | opSendOnlyImm
)

// CNP is the RoCEv2 Congestion Notification Packet opcode (Annex A17.9.2):
// BTH plus 16 reserved bytes (cnp.go). Linux rxe neither sends nor
// handles it; softib does with ECN on (rxe/congestion.go).
const CNP Opcode = 0x81

// Transport returns the transport base of op (TransportRC, ...).
func (op Opcode) Transport() Opcode { return op & 0xE0 }

// Valid reports whether op is in the opcode table (Parse accepts it).
func (op Opcode) Valid() bool { return opTable[op].Length != 0 }

// Info returns the opcode table entry; Length is 0 for unknown opcodes.
func (op Opcode) Info() *OpInfo { return &opTable[op] }

// Mask returns op's header-presence and semantic bits (0 if unknown).
func (op Opcode) Mask() Mask { return opTable[op].Mask }

// Is reports whether op has all the bits in m.
func (op Opcode) Is(m Mask) bool { return opTable[op].Mask&m == m }

// HeaderLen returns the length of BTH plus extension headers for op, or 0
// for unknown opcodes.
func (op Opcode) HeaderLen() int { return int(opTable[op].Length) }

// String returns the opcode name in Linux ib_pack.h style
// ("RC_SEND_FIRST"), or "0xNN" for an unknown opcode.
func (op Opcode) String() string {
	if n := opTable[op].Name; n != "" {
		return n
	}
	return "0x" + strconv.FormatUint(uint64(op)|0x100, 16)[1:]
}

// Mask holds per-opcode bits, modelled on rxe's opcode masks: which
// extension headers follow the BTH, and what the packet means.
type Mask uint32

// Header-presence bits.
const (
	MaskRDETH Mask = 1 << iota
	MaskDETH
	MaskRETH
	MaskAtomicETH
	MaskAETH
	MaskAtomicAckETH
	MaskImmDt
	MaskIETH
	MaskPayload // the packet carries a (possibly empty) payload and pad

	// Semantic bits.

	MaskReq    // a request (sent by the requester, handled by the responder)
	MaskAck    // a response: ACK, atomic ACK or RDMA READ response
	MaskSend   // a SEND packet
	MaskWrite  // an RDMA WRITE packet
	MaskRead   // an RDMA READ request
	MaskAtomic // an atomic request (compare & swap, fetch & add)
	MaskRWR    // consumes a receive WQE at the responder (SEND, WRITE with immediate)
	MaskComp   // last packet of a message that completes a receive WQE
	MaskStart  // FIRST or ONLY packet of a message
	MaskMiddle // MIDDLE packet of a message
	MaskEnd    // LAST or ONLY packet of a message
)

// Semantic aliases.
const (
	MaskImm  = MaskImmDt           // the opcode carries immediate data
	MaskInv  = MaskIETH            // SEND with invalidate
	MaskResp = MaskAck             // a response packet
	MaskOnly = MaskStart | MaskEnd // an ONLY packet (test with Is)
)

// HeaderKind indexes OpInfo.Offsets.
type HeaderKind uint8

// Extension header kinds, in wire order after the BTH. HdrPayload is the
// start of the payload.
const (
	HdrRDETH HeaderKind = iota
	HdrDETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrPayload
	numHeaderKinds
)

// hdrOrder lists, in wire order, each extension header's mask bit and size.
var hdrOrder = [HdrPayload]struct {
	mask Mask
	size uint8
}{
	HdrRDETH:        {MaskRDETH, RDETHSize},
	HdrDETH:         {MaskDETH, DETHSize},
	HdrRETH:         {MaskRETH, RETHSize},
	HdrAtomicETH:    {MaskAtomicETH, AtomicETHSize},
	HdrAETH:         {MaskAETH, AETHSize},
	HdrAtomicAckETH: {MaskAtomicAckETH, AtomicAckETHSize},
	HdrImmDt:        {MaskImmDt, ImmDtSize},
	HdrIETH:         {MaskIETH, IETHSize},
}

// OpInfo is one entry of the opcode table.
type OpInfo struct {
	Name string
	Mask Mask
	// Length is BTH plus all extension headers, i.e. the payload offset.
	// It is 0 for opcodes not in the table.
	Length uint8
	// Offsets gives each present extension header's offset from the start
	// of the BTH (0 when absent; the BTH itself is always at 0).
	Offsets [numHeaderKinds]uint8
}

// Offset returns the offset of header k from the start of the BTH, or -1 if
// the opcode does not carry it.
func (i *OpInfo) Offset(k HeaderKind) int {
	if k == HdrPayload {
		return int(i.Length)
	}
	if k >= HdrPayload || i.Mask&hdrOrder[k].mask == 0 {
		return -1
	}
	return int(i.Offsets[k])
}

// opTable is the 256-entry opcode table (built once; never mutated).
var opTable = buildOpTable()

func buildOpTable() [256]OpInfo {
	const (
		req   = MaskReq
		ack   = MaskAck
		send  = MaskSend | MaskRWR | MaskPayload
		write = MaskWrite | MaskPayload
		first = MaskStart
		mid   = MaskMiddle
		last  = MaskEnd
		only  = MaskStart | MaskEnd
		comp  = MaskComp
		imm   = MaskImmDt
	)
	// Per-operation entries common to all transports; RD adds RDETH (+DETH
	// on requests) and UD adds DETH below.
	ops := [...]struct {
		op   Opcode
		name string
		mask Mask
	}{
		{opSendFirst, "SEND_FIRST", req | send | first},
		{opSendMiddle, "SEND_MIDDLE", req | send | mid},
		{opSendLast, "SEND_LAST", req | send | last | comp},
		{opSendLastImm, "SEND_LAST_WITH_IMMEDIATE", req | send | last | comp | imm},
		{opSendOnly, "SEND_ONLY", req | send | only | comp},
		{opSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", req | send | only | comp | imm},
		{opWriteFirst, "RDMA_WRITE_FIRST", req | write | first | MaskRETH},
		{opWriteMiddle, "RDMA_WRITE_MIDDLE", req | write | mid},
		{opWriteLast, "RDMA_WRITE_LAST", req | write | last},
		{opWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", req | write | last | comp | MaskRWR | imm},
		{opWriteOnly, "RDMA_WRITE_ONLY", req | write | only | MaskRETH},
		{opWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", req | write | only | comp | MaskRWR | MaskRETH | imm},
		{opReadRequest, "RDMA_READ_REQUEST", req | MaskRead | only | MaskRETH},
		{opReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", ack | MaskPayload | first | MaskAETH},
		{opReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", ack | MaskPayload | mid},
		{opReadResponseLast, "RDMA_READ_RESPONSE_LAST", ack | MaskPayload | last | MaskAETH},
		{opReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", ack | MaskPayload | only | MaskAETH},
		{opAck, "ACKNOWLEDGE", ack | only | MaskAETH},
		{opAtomicAck, "ATOMIC_ACKNOWLEDGE", ack | only | MaskAETH | MaskAtomicAckETH},
		{opCompareSwap, "COMPARE_SWAP", req | MaskAtomic | only | MaskAtomicETH},
		{opFetchAdd, "FETCH_ADD", req | MaskAtomic | only | MaskAtomicETH},
		{opResync, "RESYNC", req | only},
		{opSendLastInv, "SEND_LAST_WITH_INVALIDATE", req | send | last | comp | MaskIETH},
		{opSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", req | send | only | comp | MaskIETH},
	}
	var t [256]OpInfo
	add := func(op Opcode, name string, m Mask) {
		e := &t[op]
		e.Name = name
		e.Mask = m
		off := uint8(BTHSize)
		for k := HeaderKind(0); k < HdrPayload; k++ {
			if m&hdrOrder[k].mask != 0 {
				e.Offsets[k] = off
				off += hdrOrder[k].size
			}
		}
		e.Offsets[HdrPayload] = off
		e.Length = off
	}
	for _, o := range ops {
		if o.op != opResync { // RESYNC exists only in RD
			add(TransportRC|o.op, "RC_"+o.name, o.mask)
		}
		if o.op <= opWriteOnlyImm { // UC has SEND and WRITE only
			add(TransportUC|o.op, "UC_"+o.name, o.mask)
		}
		if o.op <= opResync { // RD has no SEND with invalidate
			m := o.mask | MaskRDETH
			if m&MaskReq != 0 {
				m |= MaskDETH
			}
			add(TransportRD|o.op, "RD_"+o.name, m)
		}
		if o.op == opSendOnly || o.op == opSendOnlyImm {
			add(TransportUD|o.op, "UD_"+o.name, o.mask|MaskDETH)
		}
	}
	add(CNP, "CNP", MaskPayload)
	return t
}
