// Package mad holds pure codecs for InfiniBand management datagrams
// (MADs) as the Linux IB CM sends them on QP1 (GSI): the 24-byte MAD
// common header, every Communication Management message (IBTA Vol 1
// chapter 12: REQ, MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR, SIDR_REQ,
// SIDR_REP) and ClassPortInfo, plus the RDMA CM additions (the 36-byte
// cma_hdr and the service-ID formula).
//
// Every message layout is a field table: a list of {name, byte offset,
// bit offset, bit width} entries (in the spirit of the kernel's
// ib_pack/ib_unpack). Offsets live only in those tables; the generic
// [Field.Get]/[Field.Set] accessors read and write any entry, and the
// typed message structs ([REQ], [REP], ...) are encoded and decoded
// through the same entries. Offsets are relative to the CM data area,
// which starts at MAD byte 24 ([HeaderSize]).
//
// Control-plane encoders follow the Append/Len convention:
// len(m.Append(nil)) == m.Len(). Decoders never panic on bad input; they
// return errors matching [ErrTooShort], [ErrBadVersion], ... via errors.Is.
// Decoded private data aliases the input buffer and must be copied to be
// kept.
package mad
