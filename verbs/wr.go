package verbs

// SGE is a scatter/gather element (ibv_sge): Length bytes at virtual
// address Addr inside the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr). Which fields matter depends
// on Opcode and on the QP type.
type SendWR struct {
	// ID is returned in the completion's WRID.
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	// SGL is the local data. The provider copies the list at post time;
	// the memory it describes must stay untouched until completion.
	SGL []SGE
	// InlineData, with SendInline, is the payload itself (at most
	// QPCap.MaxInlineData bytes); it is copied at post time and SGL is
	// ignored. With SendInline and no InlineData the SGL's bytes are
	// copied at post time instead.
	InlineData []byte
	// ImmData is the immediate value of *_WITH_IMM opcodes, in host order;
	// it travels big-endian.
	ImmData uint32
	// InvalidateRKey is the rkey SEND_WITH_INV invalidates at the
	// responder, and the key LOCAL_INV invalidates locally.
	InvalidateRKey uint32

	// RemoteAddr and RKey address the remote memory of RDMA and atomic
	// operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap the swap value of CMP_AND_SWP.
	CompareAdd uint64
	Swap       uint64

	// AH, RemoteQPN and RemoteQKey address a UD send.
	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32

	// Reg is the registration of a WRRegMR, BindMW the binding of a
	// WRBindMW (see memmgt.go).
	Reg    RegWR
	BindMW BindWR
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WC is a work completion (ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	// ByteLen is the number of bytes transferred; for UD and GSI receives
	// it includes the 40-byte GRH area.
	ByteLen uint32
	// ImmData is valid when Flags has WCFlagWithImm (host order).
	ImmData uint32
	// InvalidatedRKey is valid when Flags has WCFlagWithInv.
	InvalidatedRKey uint32
	QPN             uint32
	// SrcQP is the sender's QPN of a UD/GSI receive.
	SrcQP        uint32
	Flags        WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// Err returns nil for a successful completion and a *WCError otherwise.
func (wc *WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{Status: wc.Status, WRID: wc.WRID, Opcode: wc.Opcode}
}
