// Package roce is the RoCEv2 wire format: typed byte views of the IBA
// transport headers (BTH, RDETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH,
// ImmDt, IETH), the 256-entry opcode table, a zero-allocation parser and
// builder, AETH syndrome helpers, and the ICRC, all byte-compatible with
// Linux rdma_rxe. It is a pure codec: no state, no I/O, stdlib only.
//
// A RoCEv2 packet, as carried in a UDP datagram to port 4791:
//
//	BTH (12) | ext headers | payload | pad (0-3) | ICRC (4, little-endian)
//
// # Receiving
//
// Parse validates a UDP payload against the opcode table and returns a
// Packet of views into the same buffer. Errors are ParseError values
// (ErrTruncated, ErrBadVersion, ErrUnknownOpcode, ...): compare with
// errors.Is, or index a counter array with them.
//
//	p, err := roce.Parse(buf[:n])
//	if err != nil {
//		var pe roce.ParseError
//		if errors.As(err, &pe) {
//			stats.drops[pe].Add(1) // [roce.NumParseErrors]atomic.Uint64
//		}
//		return
//	}
//	if _, err := encap.VerifyICRCAnyID(p.Bytes()); err != nil { ... } // any IPv4 ID
//	switch {
//	case p.Has(roce.MaskReq):  // to the responder
//		if p.Has(roce.MaskRETH) { va, rkey := p.RETH().VA(), p.RETH().RKey() ... }
//		data := p.Payload()
//	case p.Has(roce.MaskAck):  // to the completer
//		syn := p.AETH().Syndrome() // nil AETH for READ_RESPONSE_MIDDLE: check Has(MaskAETH)
//	}
//
// # Sending
//
// Keep one Headers value per requester/responder, fill in the fields the
// opcode needs, and Build into a send buffer; then set the ICRC with the
// QP's Encap (computed once per destination with NewEncap):
//
//	encap, err := roce.NewEncap(roce.EncapConfig{Src: laddr, Dst: raddr}) // once per QP/AV
//
//	h.BTH = roce.BTHFields{Opcode: roce.RCWriteFirst, PKey: roce.DefaultPKey,
//		DestQP: destQPN, PSN: psn}
//	h.RETH = roce.RETHFields{VA: va, RKey: rkey, DMALen: total}
//	n, err := roce.Build(buf, &h, chunk) // copies chunk; or BuildInPlace for zero copy
//	encap.SetICRC(buf[:n])
//	conn.WriteTo(buf[:n], raddr)
//
// For zero copy, gather the payload straight into
// buf[op.HeaderLen():], then call BuildInPlace(buf, &h, payloadLen). For raw
// sockets or pcaps, leave headroom in front (Encap.HeaderLen) or use
// Encap.AppendFrame.
//
// # The ICRC and the IPv4 ID
//
// The ICRC covers the IPv4 Identification, flags and total length, which an
// ordinary UDP socket neither shows on receive nor lets the sender choose.
// Send from an unconnected socket with IP_MTU_DISCOVER=IP_PMTUDISC_DO: the
// kernel then sends ID 0 with DF set, which is what EncapConfig's zero
// value assumes. On receive, IPv6 ICRCs can always be checked with an Encap
// built from the datagram's addresses; IPv4 ones exactly only when the
// real header is visible (ICRCv4 on an AF_PACKET frame, or ParseFrame +
// VerifyICRC). Without it, Encap.VerifyICRCAnyID solves the CRC for the ID
// (the ID enters the CRC linearly) and accepts exactly when some ID fits:
// a corrupted IPv4 packet then passes with probability 2^-16, not 2^-32.
//
// # PSNs
//
// PSNs and MSNs are seqnum.PSN / seqnum.MSN (24-bit, compared by signed
// difference); never compare them with <.
//
// References: IBTA Vol 1 ch. 9 (transport), Annex A17 (RoCEv2), and the
// project's roce-wire.md.
package roce
