// o2iblnd wire formats: the kib_msg header and bodies, RDMA descriptors,
// connection parameters, the kib_rej reject private data and the kib_msg
// checksum (lnet-wire.md §6). Pure codecs; the driver lives in
// softib/lnet/o2iblnd.
//
// Every o2iblnd message travels in its sender's byte order; a receiver
// detects a byte-swapped peer by the magic. softib sends little-endian.
// UnpackKibMsg normalizes a received message in place to little-endian
// (after verifying its checksum over the bytes as received), so the KibMsg
// accessors always read host values. The embedded lnet_hdr is always
// little-endian and is never flipped.

package lnetwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// o2iblnd protocol constants (lnet-wire.md §6.1–6.6, §6.13).
const (
	// KibMagic is IBLND_MSG_MAGIC.
	KibMagic = O2IBLNDMagic
	// KibVersion1 is the legacy protocol (fixed queue depth 8, no
	// out-of-band NOOPs).
	KibVersion1 uint16 = 0x11
	// KibVersion2 is the current protocol; no V3 exists.
	KibVersion2 uint16 = 0x12
	// KibVersion is the version softib proposes.
	KibVersion = KibVersion2

	// KibHdrLen is the packed kib_msg header.
	KibHdrLen = 48
	// KibConnParamsLen is kib_connparams.
	KibConnParamsLen = 8
	// KibConnMsgLen is a CONNREQ/CONNACK: exactly the 56 bytes of
	// rdma_connect private data.
	KibConnMsgLen = KibHdrLen + KibConnParamsLen
	// KibImmediateHdrLen is an IMMEDIATE without payload (header +
	// lnet_hdr).
	KibImmediateHdrLen = KibHdrLen + HdrSize
	// KibPutReqLen is a PUT_REQ.
	KibPutReqLen = KibHdrLen + HdrSize + 8
	// KibPutAckBaseLen is a PUT_ACK with an empty descriptor.
	KibPutAckBaseLen = KibHdrLen + 16 + KibRDMADescBaseLen
	// KibGetReqBaseLen is a GET_REQ with an empty descriptor.
	KibGetReqBaseLen = KibHdrLen + HdrSize + 8 + KibRDMADescBaseLen
	// KibCompletionLen is a PUT_NAK/PUT_DONE/GET_DONE.
	KibCompletionLen = KibHdrLen + 12
	// KibRDMADescBaseLen is {rd_key, rd_nfrags}.
	KibRDMADescBaseLen = 8
	// KibRDMAFragLen is one {u32 nob, u64 addr} fragment (addr misaligned).
	KibRDMAFragLen = 12
	// KibMaxRDMAFrags is IBLND_MAX_RDMA_FRAGS (LNET_MAX_IOV + 1).
	KibMaxRDMAFrags = 257
	// KibMsgSize is IBLND_MSG_SIZE: the largest message and the size of
	// every receive buffer.
	KibMsgSize = 4096
	// KibMaxImmediatePayload is the largest payload sent as IMMEDIATE.
	KibMaxImmediatePayload = KibMsgSize - KibImmediateHdrLen
	// KibRejLen is kib_rej.
	KibRejLen = 24
	// KibRejMinLen is what a reject must hold to name a reason
	// (offsetof(kib_rej, ibr_padding)).
	KibRejMinLen = 7

	// KibQueueDepthV1 and KibCreditHighWaterV1 are fixed by V1.
	KibQueueDepthV1      = 8
	KibCreditHighWaterV1 = 7
	// KibMaxQueueDepth is the largest queue depth (ibm_credits is a u8).
	KibMaxQueueDepth = 255
	// KibDefaultService is the RDMA CM port (service) o2iblnd listens on.
	KibDefaultService = 987
)

// KibMsgType is an o2iblnd message type (lnet-wire.md §6.2).
type KibMsgType uint8

// o2iblnd message types.
const (
	KibCONNREQ   KibMsgType = 0xC0
	KibCONNACK   KibMsgType = 0xC1
	KibNOOP      KibMsgType = 0xD0
	KibIMMEDIATE KibMsgType = 0xD1
	KibPUTREQ    KibMsgType = 0xD2
	KibPUTNAK    KibMsgType = 0xD3
	KibPUTACK    KibMsgType = 0xD4
	KibPUTDONE   KibMsgType = 0xD5
	KibGETREQ    KibMsgType = 0xD6
	KibGETDONE   KibMsgType = 0xD7
)

// kibTypeInfo is one row of the message type table.
type kibTypeInfo struct {
	name string
	min  int // smallest valid ibm_nob
}

var kibTypes = map[KibMsgType]kibTypeInfo{
	KibCONNREQ:   {"CONNREQ", KibConnMsgLen},
	KibCONNACK:   {"CONNACK", KibConnMsgLen},
	KibNOOP:      {"NOOP", KibHdrLen},
	KibIMMEDIATE: {"IMMEDIATE", KibImmediateHdrLen},
	KibPUTREQ:    {"PUT_REQ", KibPutReqLen},
	KibPUTNAK:    {"PUT_NAK", KibCompletionLen},
	KibPUTACK:    {"PUT_ACK", KibPutAckBaseLen},
	KibPUTDONE:   {"PUT_DONE", KibCompletionLen},
	KibGETREQ:    {"GET_REQ", KibGetReqBaseLen},
	KibGETDONE:   {"GET_DONE", KibCompletionLen},
}

// String returns the Lustre name without the IBLND_MSG_ prefix.
func (t KibMsgType) String() string {
	if i, ok := kibTypes[t]; ok {
		return i.name
	}
	return fmt.Sprintf("KibMsgType(%#x)", uint8(t))
}

// Valid reports whether t is a defined type.
func (t KibMsgType) Valid() bool { _, ok := kibTypes[t]; return ok }

// MinLen is the smallest message of type t (its fixed part), 0 if unknown.
func (t KibMsgType) MinLen() int { return kibTypes[t].min }

// Errors of the o2iblnd codecs, matched with errors.Is. Every decode error
// also matches ErrKibProto (the driver's -EPROTO).
var (
	// ErrKibProto is any malformed o2iblnd message or reject.
	ErrKibProto = errors.New("lnetwire: o2iblnd protocol error")
	// ErrKibCksum is a checksum mismatch.
	ErrKibCksum = fmt.Errorf("%w: checksum mismatch", ErrKibProto)
)

// KibError describes a malformed o2iblnd message. It matches ErrKibProto
// and, where one applies, ErrShort, ErrBadMagic, ErrBadVersion or
// ErrBadType.
type KibError struct {
	What string
	kind error
}

// Error describes the problem.
func (e *KibError) Error() string { return "lnetwire: o2iblnd: " + e.What }

// Is matches ErrKibProto and the error's kind.
func (e *KibError) Is(target error) bool {
	return target == ErrKibProto || (e.kind != nil && target == e.kind)
}

func kibErr(kind error, format string, a ...any) error {
	return &KibError{What: fmt.Sprintf(format, a...), kind: kind}
}

// Header offsets (lnet-wire.md §6.1) and body offsets (§6.3).
const (
	kmMagic    = 0
	kmVersion  = 4
	kmType     = 6
	kmCredits  = 7
	kmNob      = 8
	kmCksum    = 12
	kmSrcNID   = 16
	kmSrcStamp = 24
	kmDstNID   = 32
	kmDstStamp = 40
	kmBody     = 48

	kmQueueDepth = 48
	kmMaxFrags   = 50
	kmMaxMsgSize = 52

	kmLNetHdr     = 48
	kmReqCookie   = 120 // PUT_REQ, GET_REQ
	kmGetRD       = 128
	kmAckSrcCook  = 48
	kmAckDstCook  = 56
	kmAckRD       = 64
	kmCompCookie  = 48
	kmCompStatus  = 56
	kmRDKey       = 0
	kmRDNFrags    = 4
	kmRDFrags     = 8
	kmFragNob     = 0
	kmFragAddr    = 4
	kmRejMagic    = 0
	kmRejVersion  = 4
	kmRejWhy      = 6
	kmRejIncarn   = 8
	kmRejConnPrms = 16
)

// KibMsg is a view of a kib_msg in little-endian (host) order: a message
// built here, or one UnpackKibMsg validated and normalized. Body accessors
// do not check the type; UnpackKibMsg guarantees the fixed part of the
// body for the message's type is present.
type KibMsg []byte

// Magic returns ibm_magic.
func (m KibMsg) Magic() uint32 { return le.Uint32(m[kmMagic:]) }

// Version returns ibm_version.
func (m KibMsg) Version() uint16 { return le.Uint16(m[kmVersion:]) }

// Type returns ibm_type.
func (m KibMsg) Type() KibMsgType { return KibMsgType(m[kmType]) }

// Credits returns ibm_credits, the credits the sender returns.
func (m KibMsg) Credits() uint8 { return m[kmCredits] }

// Nob returns ibm_nob, the whole message length.
func (m KibMsg) Nob() uint32 { return le.Uint32(m[kmNob:]) }

// Cksum returns ibm_cksum (0: none).
func (m KibMsg) Cksum() uint32 { return le.Uint32(m[kmCksum:]) }

// SrcNID returns ibm_srcnid.
func (m KibMsg) SrcNID() NID { return NID(le.Uint64(m[kmSrcNID:])) }

// SrcStamp returns ibm_srcstamp, the sender's incarnation.
func (m KibMsg) SrcStamp() uint64 { return le.Uint64(m[kmSrcStamp:]) }

// DstNID returns ibm_dstnid.
func (m KibMsg) DstNID() NID { return NID(le.Uint64(m[kmDstNID:])) }

// DstStamp returns ibm_dststamp, the receiver's incarnation as the sender
// knows it.
func (m KibMsg) DstStamp() uint64 { return le.Uint64(m[kmDstStamp:]) }

// ConnParams returns the CONNREQ/CONNACK body.
func (m KibMsg) ConnParams() KibConnParams {
	return KibConnParams{
		QueueDepth: le.Uint16(m[kmQueueDepth:]),
		MaxFrags:   le.Uint16(m[kmMaxFrags:]),
		MaxMsgSize: le.Uint32(m[kmMaxMsgSize:]),
	}
}

// LNetHdr returns the lnet_hdr of an IMMEDIATE, PUT_REQ or GET_REQ.
func (m KibMsg) LNetHdr() Hdr { return Hdr(m[kmLNetHdr : kmLNetHdr+HdrSize]) }

// Payload returns an IMMEDIATE's payload (bytes after the lnet_hdr up to
// ibm_nob).
func (m KibMsg) Payload() []byte { return m[KibImmediateHdrLen:m.Nob()] }

// ReqCookie returns the completion cookie of a PUT_REQ or GET_REQ.
func (m KibMsg) ReqCookie() uint64 { return le.Uint64(m[kmReqCookie:]) }

// AckSrcCookie returns a PUT_ACK's reflected PUT_REQ cookie.
func (m KibMsg) AckSrcCookie() uint64 { return le.Uint64(m[kmAckSrcCook:]) }

// AckDstCookie returns a PUT_ACK's cookie for the PUT_DONE.
func (m KibMsg) AckDstCookie() uint64 { return le.Uint64(m[kmAckDstCook:]) }

// RD returns the RDMA descriptor of a PUT_ACK or GET_REQ (nil otherwise).
func (m KibMsg) RD() KibRDMADesc {
	switch m.Type() {
	case KibPUTACK:
		return KibRDMADesc(m[kmAckRD:m.Nob()])
	case KibGETREQ:
		return KibRDMADesc(m[kmGetRD:m.Nob()])
	}
	return nil
}

// CompletionCookie returns the cookie of a PUT_NAK, PUT_DONE or GET_DONE.
func (m KibMsg) CompletionCookie() uint64 { return le.Uint64(m[kmCompCookie:]) }

// CompletionStatus returns the status of a PUT_NAK, PUT_DONE or GET_DONE:
// a negative errno, or a byte count.
func (m KibMsg) CompletionStatus() int32 { return int32(le.Uint32(m[kmCompStatus:])) }

// SetCredits writes ibm_credits.
func (m KibMsg) SetCredits(c uint8) { m[kmCredits] = c }

// SetCksum writes ibm_cksum.
func (m KibMsg) SetCksum(c uint32) { le.PutUint32(m[kmCksum:], c) }

// KibMsgHdr is the decoded kib_msg header.
type KibMsgHdr struct {
	Version  uint16
	Type     KibMsgType
	Credits  uint8
	Nob      uint32
	Cksum    uint32
	SrcNID   NID
	SrcStamp uint64
	DstNID   NID
	DstStamp uint64
}

// Hdr decodes the header of m.
func (m KibMsg) Hdr() KibMsgHdr {
	return KibMsgHdr{
		Version: m.Version(), Type: m.Type(), Credits: m.Credits(), Nob: m.Nob(), Cksum: m.Cksum(),
		SrcNID: m.SrcNID(), SrcStamp: m.SrcStamp(), DstNID: m.DstNID(), DstStamp: m.DstStamp(),
	}
}

// PackKibHdr writes the header h (magic, and h.Nob, h.Cksum as given)
// little-endian into b[:KibHdrLen] in place: the data path builds
// messages in pre-registered buffers without allocating.
func PackKibHdr(b []byte, h *KibMsgHdr) {
	b = b[:KibHdrLen]
	le.PutUint32(b[kmMagic:], KibMagic)
	le.PutUint16(b[kmVersion:], h.Version)
	b[kmType] = byte(h.Type)
	b[kmCredits] = h.Credits
	le.PutUint32(b[kmNob:], h.Nob)
	le.PutUint32(b[kmCksum:], h.Cksum)
	le.PutUint64(b[kmSrcNID:], uint64(h.SrcNID))
	le.PutUint64(b[kmSrcStamp:], h.SrcStamp)
	le.PutUint64(b[kmDstNID:], uint64(h.DstNID))
	le.PutUint64(b[kmDstStamp:], h.DstStamp)
}

// KibConnParams is kib_connparams: what a side of a connection supports.
type KibConnParams struct {
	QueueDepth uint16 // messages in flight (peer credits)
	MaxFrags   uint16 // RDMA fragments per descriptor
	MaxMsgSize uint32 // largest message (KibMsgSize)
}

// Len returns KibConnParamsLen.
func (*KibConnParams) Len() int { return KibConnParamsLen }

// Append appends the little-endian encoding to b.
func (p *KibConnParams) Append(b []byte) []byte {
	b = le.AppendUint16(b, p.QueueDepth)
	b = le.AppendUint16(b, p.MaxFrags)
	return le.AppendUint32(b, p.MaxMsgSize)
}

// PutCompletion writes a completion body (cookie, status) at b[48:60].
func PutCompletion(b []byte, cookie uint64, status int32) {
	le.PutUint64(b[kmCompCookie:], cookie)
	le.PutUint32(b[kmCompStatus:], uint32(status))
}

// PutReqCookie writes the cookie of a PUT_REQ/GET_REQ at b[120:128].
func PutReqCookie(b []byte, cookie uint64) { le.PutUint64(b[kmReqCookie:], cookie) }

// PutAckCookies writes a PUT_ACK's cookies at b[48:64].
func PutAckCookies(b []byte, src, dst uint64) {
	le.PutUint64(b[kmAckSrcCook:], src)
	le.PutUint64(b[kmAckDstCook:], dst)
}

// KibRDMADesc is a view of kib_rdma_desc in little-endian order: key,
// fragment count, then NFrags() 12-byte fragments.
type KibRDMADesc []byte

// Key returns rd_key, the rkey of every fragment.
func (d KibRDMADesc) Key() uint32 { return le.Uint32(d[kmRDKey:]) }

// NFrags returns rd_nfrags.
func (d KibRDMADesc) NFrags() int { return int(le.Uint32(d[kmRDNFrags:])) }

// Frag returns fragment i.
func (d KibRDMADesc) Frag(i int) KibRDMAFrag {
	o := kmRDFrags + i*KibRDMAFragLen
	return KibRDMAFrag{Nob: le.Uint32(d[o+kmFragNob:]), Addr: le.Uint64(d[o+kmFragAddr:])}
}

// Size returns the total bytes the descriptor names (kiblnd_rd_size).
func (d KibRDMADesc) Size() int64 {
	var n int64
	for i := range d.NFrags() {
		n += int64(d.Frag(i).Nob)
	}
	return n
}

// KibRDMAFrag is one RDMA fragment.
type KibRDMAFrag struct {
	Nob  uint32
	Addr uint64
}

// PutRDMADesc writes key and frags at b (which must hold
// KibRDMADescBaseLen + 12·len(frags) bytes) and returns the bytes used.
func PutRDMADesc(b []byte, key uint32, frags []KibRDMAFrag) int {
	le.PutUint32(b[kmRDKey:], key)
	le.PutUint32(b[kmRDNFrags:], uint32(len(frags)))
	o := kmRDFrags
	for _, f := range frags {
		le.PutUint32(b[o+kmFragNob:], f.Nob)
		le.PutUint64(b[o+kmFragAddr:], f.Addr)
		o += KibRDMAFragLen
	}
	return o
}

// KibMsgFields is a whole kib_msg in decoded form, for control messages,
// tests and tools; data paths write messages in place (PackKibHdr and the
// Put* helpers).
type KibMsgFields struct {
	KibMsgHdr
	// ConnParams is the CONNREQ/CONNACK body.
	ConnParams KibConnParams
	// LNet is the lnet_hdr of IMMEDIATE, PUT_REQ and GET_REQ.
	LNet Header
	// Payload is an IMMEDIATE's payload.
	Payload []byte
	// Cookie is the PUT_REQ/GET_REQ cookie, the PUT_ACK dst cookie or the
	// completion cookie.
	Cookie uint64
	// SrcCookie is the PUT_ACK's reflected PUT_REQ cookie.
	SrcCookie uint64
	// Status is the completion status.
	Status int32
	// RDKey and Frags are the PUT_ACK/GET_REQ RDMA descriptor.
	RDKey uint32
	Frags []KibRDMAFrag
}

// Len returns the encoded size (what Append sets as ibm_nob).
func (f *KibMsgFields) Len() int {
	switch f.Type {
	case KibCONNREQ, KibCONNACK:
		return KibConnMsgLen
	case KibIMMEDIATE:
		return KibImmediateHdrLen + len(f.Payload)
	case KibPUTREQ:
		return KibPutReqLen
	case KibPUTACK:
		return KibPutAckBaseLen + KibRDMAFragLen*len(f.Frags)
	case KibGETREQ:
		return KibGetReqBaseLen + KibRDMAFragLen*len(f.Frags)
	case KibPUTNAK, KibPUTDONE, KibGETDONE:
		return KibCompletionLen
	}
	return KibHdrLen
}

// Append appends the little-endian message to b; ibm_nob is set to Len
// and the header's Nob field is ignored. The checksum is Cksum as given:
// use SetKibCksum afterwards to compute one.
func (f *KibMsgFields) Append(b []byte) []byte {
	n := f.Len()
	start := len(b)
	b = append(b, make([]byte, n)...)
	m := b[start:]
	h := f.KibMsgHdr
	h.Nob = uint32(n)
	PackKibHdr(m, &h)
	switch f.Type {
	case KibCONNREQ, KibCONNACK:
		f.ConnParams.Append(m[kmBody:kmBody])
	case KibIMMEDIATE:
		f.LNet.Encode(m[kmLNetHdr:])
		copy(m[KibImmediateHdrLen:], f.Payload)
	case KibPUTREQ:
		f.LNet.Encode(m[kmLNetHdr:])
		PutReqCookie(m, f.Cookie)
	case KibGETREQ:
		f.LNet.Encode(m[kmLNetHdr:])
		PutReqCookie(m, f.Cookie)
		PutRDMADesc(m[kmGetRD:], f.RDKey, f.Frags)
	case KibPUTACK:
		PutAckCookies(m, f.SrcCookie, f.Cookie)
		PutRDMADesc(m[kmAckRD:], f.RDKey, f.Frags)
	case KibPUTNAK, KibPUTDONE, KibGETDONE:
		PutCompletion(m, f.Cookie, f.Status)
	}
	return b
}

// Decode fills f from a validated, normalized message (UnpackKibMsg).
// Payload and Frags are freshly allocated.
func (f *KibMsgFields) Decode(m KibMsg) error {
	*f = KibMsgFields{KibMsgHdr: m.Hdr()}
	switch f.Type {
	case KibCONNREQ, KibCONNACK:
		f.ConnParams = m.ConnParams()
	case KibIMMEDIATE, KibPUTREQ, KibGETREQ:
		if err := f.LNet.Decode(m[kmLNetHdr:]); err != nil {
			return err
		}
		switch f.Type {
		case KibIMMEDIATE:
			f.Payload = append([]byte(nil), m.Payload()...)
		default:
			f.Cookie = m.ReqCookie()
		}
	case KibPUTACK:
		f.SrcCookie, f.Cookie = m.AckSrcCookie(), m.AckDstCookie()
	case KibPUTNAK, KibPUTDONE, KibGETDONE:
		f.Cookie, f.Status = m.CompletionCookie(), m.CompletionStatus()
	}
	if rd := m.RD(); rd != nil {
		f.RDKey = rd.Key()
		f.Frags = make([]KibRDMAFrag, rd.NFrags())
		for i := range f.Frags {
			f.Frags[i] = rd.Frag(i)
		}
	}
	return nil
}

// KibCksum computes kiblnd_cksum over b: starting from 0, for each byte
// sum = rotl32(sum, 1) + (signed char)byte; a zero result becomes 1,
// since 0 means "no checksum" (lnet-wire.md §6.4). The caller zeroes the
// cksum field first.
func KibCksum(b []byte) uint32 {
	var sum uint32
	for _, c := range b {
		sum = bits.RotateLeft32(sum, 1) + uint32(int32(int8(c)))
	}
	if sum == 0 {
		return 1
	}
	return sum
}

// SetKibCksum computes the checksum of the message in b[:nob] (ibm_nob
// bytes, field zeroed while summing) and stores it.
func SetKibCksum(m KibMsg) {
	m.SetCksum(0)
	m.SetCksum(KibCksum(m[:m.Nob()]))
}

// UnpackKibMsg validates a received message in b (nob bytes as received)
// as kiblnd_unpack_msg does and returns a view of its first ibm_nob
// bytes. A byte-swapped message is flipped in place to little-endian
// after its checksum was verified over the bytes as sent. Errors match
// ErrKibProto (and ErrShort, ErrBadMagic, ErrBadVersion, ErrBadType or
// ErrKibCksum where they apply).
func UnpackKibMsg(b []byte) (KibMsg, error) {
	if len(b) < kmType {
		return nil, kibErr(ErrShort, "short message: %d bytes", len(b))
	}
	magic := le.Uint32(b[kmMagic:])
	var flip bool
	switch magic {
	case KibMagic:
	case bits.ReverseBytes32(KibMagic):
		flip = true
	default:
		return nil, kibErr(ErrBadMagic, "bad magic %#08x", magic)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if flip {
		bo = binary.BigEndian
	}
	ver := bo.Uint16(b[kmVersion:])
	if ver != KibVersion1 && ver != KibVersion2 {
		return nil, kibErr(ErrBadVersion, "bad version %#x", ver)
	}
	if len(b) < KibHdrLen {
		return nil, kibErr(ErrShort, "short message: %d bytes", len(b))
	}
	nob := bo.Uint32(b[kmNob:])
	if nob > uint32(len(b)) || nob < KibHdrLen {
		return nil, kibErr(ErrShort, "ibm_nob %d, received %d", nob, len(b))
	}
	m := KibMsg(b[:nob])
	if ck := bo.Uint32(b[kmCksum:]); ck != 0 {
		le.PutUint32(m[kmCksum:], 0)
		got := KibCksum(m)
		bo.PutUint32(m[kmCksum:], ck)
		if got != ck {
			return nil, fmt.Errorf("%w: got %#x, message says %#x", ErrKibCksum, got, ck)
		}
	}
	t := KibMsgType(m[kmType])
	info, ok := kibTypes[t]
	if !ok {
		return nil, kibErr(ErrBadType, "unknown message type %#x", uint8(t))
	}
	if int(nob) < info.min {
		return nil, kibErr(ErrShort, "%v of %d bytes, need %d", t, nob, info.min)
	}
	if flip {
		swapKibMsg(m, t, true)
	}
	if m.SrcNID() == NIDAny {
		return nil, kibErr(ErrBadNID, "bad srcnid %v", m.SrcNID())
	}
	if rd := m.RD(); rd != nil {
		n := rd.NFrags()
		if n < 1 || n > KibMaxRDMAFrags {
			return nil, kibErr(nil, "%v with %d RDMA fragments", t, rd.NFrags())
		}
		if need := KibRDMADescBaseLen + n*KibRDMAFragLen; len(rd) < need {
			return nil, kibErr(ErrShort, "%v with %d fragments in %d bytes", t, n, nob)
		}
	}
	return m, nil
}

// swapKibMsg flips a message's header and body fields in place
// (kiblnd_unpack_msg, kiblnd_unpack_rd). toHost says the message arrives
// swapped (the fragment count is readable after flipping), else it is
// being swapped from host order (readable before). The lnet_hdr is always
// little-endian and stays untouched.
func swapKibMsg(m KibMsg, t KibMsgType, toHost bool) {
	sw16 := func(o int) { le.PutUint16(m[o:], bits.ReverseBytes16(le.Uint16(m[o:]))) }
	sw32 := func(o int) { le.PutUint32(m[o:], bits.ReverseBytes32(le.Uint32(m[o:]))) }
	sw64 := func(o int) { le.PutUint64(m[o:], bits.ReverseBytes64(le.Uint64(m[o:]))) }
	sw32(kmMagic)
	sw16(kmVersion)
	sw32(kmNob)
	sw32(kmCksum)
	sw64(kmSrcNID)
	sw64(kmSrcStamp)
	sw64(kmDstNID)
	sw64(kmDstStamp)
	rd := -1
	switch t {
	case KibCONNREQ, KibCONNACK:
		sw16(kmQueueDepth)
		sw16(kmMaxFrags)
		sw32(kmMaxMsgSize)
	case KibPUTREQ:
		sw64(kmReqCookie)
	case KibGETREQ:
		sw64(kmReqCookie)
		rd = kmGetRD
	case KibPUTACK:
		sw64(kmAckSrcCook)
		sw64(kmAckDstCook)
		rd = kmAckRD
	case KibPUTNAK, KibPUTDONE, KibGETDONE:
		sw64(kmCompCookie)
		sw32(kmCompStatus)
	}
	if rd < 0 {
		return
	}
	sw32(rd + kmRDKey)
	n := int(le.Uint32(m[rd+kmRDNFrags:]))
	sw32(rd + kmRDNFrags)
	if toHost {
		n = int(le.Uint32(m[rd+kmRDNFrags:]))
	}
	for i := 0; i < n && rd+kmRDFrags+(i+1)*KibRDMAFragLen <= len(m); i++ {
		o := rd + kmRDFrags + i*KibRDMAFragLen
		sw32(o + kmFragNob)
		sw64(o + kmFragAddr)
	}
}

// SwapKibMsg byte-swaps a well-formed little-endian message in place, as
// a big-endian sender would have written it (tests and tools).
func SwapKibMsg(m KibMsg) { swapKibMsg(m, m.Type(), false) }

// KibRejReason is a kib_rej ibr_why (lnet-wire.md §6.6).
type KibRejReason uint8

// Reject reasons.
const (
	KibRejConnRace     KibRejReason = 1 // connection race lost
	KibRejNoResources  KibRejReason = 2
	KibRejFatal        KibRejReason = 3
	KibRejConnUncompat KibRejReason = 4 // incompatible version/params
	KibRejConnStale    KibRejReason = 5 // stale incarnation
	KibRejRDMAFrags    KibRejReason = 6 // max_frags too large
	KibRejMsgQueueSize KibRejReason = 7 // queue depth too large
	KibRejInvalidSrvID KibRejReason = 8
	KibRejEarly        KibRejReason = 9 // NI not up yet
	kibRejReasonsEnd                = 10
)

var kibRejNames = [kibRejReasonsEnd]string{"", "CONN_RACE", "NO_RESOURCES", "FATAL", "CONN_UNCOMPAT",
	"CONN_STALE", "RDMA_FRAGS", "MSG_QUEUE_SIZE", "INVALID_SRV_ID", "EARLY"}

// String returns the Lustre name without the IBLND_REJECT_ prefix.
func (r KibRejReason) String() string {
	if r > 0 && r < kibRejReasonsEnd {
		return kibRejNames[r]
	}
	return fmt.Sprintf("KibRejReason(%d)", uint8(r))
}

// Retry reports whether the active side reconnects after this reason
// (kiblnd_check_reconnect): RACE, STALE, UNCOMPAT, MSG_QUEUE_SIZE and
// RDMA_FRAGS.
func (r KibRejReason) Retry() bool {
	switch r {
	case KibRejConnRace, KibRejConnStale, KibRejConnUncompat, KibRejMsgQueueSize, KibRejRDMAFrags:
		return true
	}
	return false
}

// KibRej is kib_rej, the private data of a consumer-defined CM REJ.
type KibRej struct {
	Magic       uint32 // KibMagic (ProtoMagic from very old peers)
	Version     uint16
	Why         KibRejReason
	Incarnation uint64
	ConnParams  KibConnParams
	// HasParams is false when a decoded reject carried no incarnation and
	// connparams (a V1 peer or a reject shorter than 24 bytes).
	HasParams bool
}

// Len returns KibRejLen.
func (*KibRej) Len() int { return KibRejLen }

// Append appends the little-endian 24-byte kib_rej to b (all fields, as
// Lustre always sends).
func (r *KibRej) Append(b []byte) []byte {
	b = le.AppendUint32(b, r.Magic)
	b = le.AppendUint16(b, r.Version)
	b = append(b, byte(r.Why), 0)
	b = le.AppendUint64(b, r.Incarnation)
	return r.ConnParams.Append(b)
}

// ParseKibRej decodes reject private data as kiblnd_rejected does: at
// least 7 bytes; magic KibMagic or ProtoMagic in either byte order;
// incarnation and connparams only when 24 bytes are present and the
// version is above V1 (IB CM REJ private data is always padded to 148
// bytes, so the length alone proves nothing). Errors match ErrKibProto.
func ParseKibRej(b []byte) (KibRej, error) {
	var r KibRej
	if len(b) < KibRejMinLen {
		return r, kibErr(ErrShort, "reject of %d bytes", len(b))
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch m := le.Uint32(b[kmRejMagic:]); m {
	case KibMagic, ProtoMagic:
	case bits.ReverseBytes32(KibMagic), bits.ReverseBytes32(ProtoMagic):
		bo = binary.BigEndian
	default:
		return r, kibErr(ErrBadMagic, "reject magic %#08x", m)
	}
	r.Magic = bo.Uint32(b[kmRejMagic:])
	r.Version = bo.Uint16(b[kmRejVersion:])
	r.Why = KibRejReason(b[kmRejWhy])
	if len(b) >= KibRejLen && r.Version > KibVersion1 {
		r.HasParams = true
		r.Incarnation = bo.Uint64(b[kmRejIncarn:])
		p := b[kmRejConnPrms:]
		r.ConnParams = KibConnParams{QueueDepth: bo.Uint16(p), MaxFrags: bo.Uint16(p[2:]), MaxMsgSize: bo.Uint32(p[4:])}
	}
	return r, nil
}
