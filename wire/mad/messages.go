package mad

import "fmt"

// Message is the body of one CM MAD: the [CMDataSize] bytes after the
// common header. Every CM message type implements it.
type Message interface {
	// AttrID returns the attribute ID that selects this message.
	AttrID() AttrID
	// Len returns the encoded size, always [CMDataSize].
	Len() int
	// Append appends the encoded body to b. Private data and additional
	// info longer than their areas are truncated; call Validate first.
	Append(b []byte) []byte
	// Decode fills the message from a body of at least [CMDataSize]
	// bytes. Byte slices in the result alias d.
	Decode(d []byte) error
	// Validate checks that variable-length parts fit their areas.
	Validate() error
}

func checkLen(d []byte, name string) error {
	if len(d) < CMDataSize {
		return fmt.Errorf("mad: %s body %d bytes, want %d: %w", name, len(d), CMDataSize, ErrTooShort)
	}
	return nil
}

func checkFit(name string, f Field, p []byte) error {
	if len(p) > f.Size() {
		return fmt.Errorf("mad: %s %s %d bytes, max %d: %w", name, f.Name, len(p), f.Size(), ErrTooLong)
	}
	return nil
}

// REQ is the Connection Request (IBTA Vol 1 §12.6.5, Table 106).
type REQ struct {
	LocalCommID             uint32
	VendorID                uint32 // ECE vendor ID, 24 bits
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32
	InitiatorDepth          uint8
	RemoteEECN              uint32
	RemoteCMResponseTimeout Timeout
	TransportType           TransportType
	E2EFlowControl          bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  Timeout
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 MTU
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits
	Primary                 Path
	Alternate               Path
	SAPSupported            bool
	PrivateData             []byte // up to 92 bytes
}

// AttrID returns [AttrREQ].
func (m *REQ) AttrID() AttrID { return AttrREQ }

// Len returns [CMDataSize].
func (m *REQ) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *REQ) Validate() error { return checkFit("REQ", reqPrivateData, m.PrivateData) }

// Append appends the encoded REQ body.
func (m *REQ) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	reqLocalCommID.Set(d, uint64(m.LocalCommID))
	reqVendorID.Set(d, uint64(m.VendorID))
	reqServiceID.Set(d, m.ServiceID)
	reqLocalCAGUID.Set(d, m.LocalCAGUID)
	reqLocalQKey.Set(d, uint64(m.LocalQKey))
	reqLocalQPN.Set(d, uint64(m.LocalQPN))
	reqResponderResources.Set(d, uint64(m.ResponderResources))
	reqLocalEECN.Set(d, uint64(m.LocalEECN))
	reqInitiatorDepth.Set(d, uint64(m.InitiatorDepth))
	reqRemoteEECN.Set(d, uint64(m.RemoteEECN))
	reqRemoteCMRespTO.Set(d, uint64(m.RemoteCMResponseTimeout))
	reqTransportType.Set(d, uint64(m.TransportType))
	reqE2EFlowControl.setBool(d, m.E2EFlowControl)
	reqStartingPSN.Set(d, uint64(m.StartingPSN))
	reqLocalCMRespTO.Set(d, uint64(m.LocalCMResponseTimeout))
	reqRetryCount.Set(d, uint64(m.RetryCount))
	reqPKey.Set(d, uint64(m.PKey))
	reqPathMTU.Set(d, uint64(m.PathMTU))
	reqRDCExists.setBool(d, m.RDCExists)
	reqRNRRetryCount.Set(d, uint64(m.RNRRetryCount))
	reqMaxCMRetries.Set(d, uint64(m.MaxCMRetries))
	reqSRQ.setBool(d, m.SRQ)
	reqExtTransportType.Set(d, uint64(m.ExtTransportType))
	reqPrimary.put(d, &m.Primary)
	reqAlternate.put(d, &m.Alternate)
	reqSAPSupported.setBool(d, m.SAPSupported)
	reqPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a REQ body.
func (m *REQ) Decode(d []byte) error {
	if err := checkLen(d, "REQ"); err != nil {
		return err
	}
	m.LocalCommID = uint32(reqLocalCommID.Get(d))
	m.VendorID = uint32(reqVendorID.Get(d))
	m.ServiceID = reqServiceID.Get(d)
	m.LocalCAGUID = reqLocalCAGUID.Get(d)
	m.LocalQKey = uint32(reqLocalQKey.Get(d))
	m.LocalQPN = uint32(reqLocalQPN.Get(d))
	m.ResponderResources = uint8(reqResponderResources.Get(d))
	m.LocalEECN = uint32(reqLocalEECN.Get(d))
	m.InitiatorDepth = uint8(reqInitiatorDepth.Get(d))
	m.RemoteEECN = uint32(reqRemoteEECN.Get(d))
	m.RemoteCMResponseTimeout = Timeout(reqRemoteCMRespTO.Get(d))
	m.TransportType = TransportType(reqTransportType.Get(d))
	m.E2EFlowControl = reqE2EFlowControl.bool(d)
	m.StartingPSN = uint32(reqStartingPSN.Get(d))
	m.LocalCMResponseTimeout = Timeout(reqLocalCMRespTO.Get(d))
	m.RetryCount = uint8(reqRetryCount.Get(d))
	m.PKey = uint16(reqPKey.Get(d))
	m.PathMTU = MTU(reqPathMTU.Get(d))
	m.RDCExists = reqRDCExists.bool(d)
	m.RNRRetryCount = uint8(reqRNRRetryCount.Get(d))
	m.MaxCMRetries = uint8(reqMaxCMRetries.Get(d))
	m.SRQ = reqSRQ.bool(d)
	m.ExtTransportType = uint8(reqExtTransportType.Get(d))
	reqPrimary.get(d, &m.Primary)
	reqAlternate.get(d, &m.Alternate)
	m.SAPSupported = reqSAPSupported.bool(d)
	m.PrivateData = reqPrivateData.Bytes(d)
	return nil
}

// MRA is the Message Receipt Acknowledgement (Table 107).
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MsgType // 2 bits
	ServiceTimeout Timeout
	PrivateData    []byte // up to 222 bytes
}

// AttrID returns [AttrMRA].
func (m *MRA) AttrID() AttrID { return AttrMRA }

// Len returns [CMDataSize].
func (m *MRA) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *MRA) Validate() error { return checkFit("MRA", mraPrivateData, m.PrivateData) }

// Append appends the encoded MRA body.
func (m *MRA) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	mraLocalCommID.Set(d, uint64(m.LocalCommID))
	mraRemoteCommID.Set(d, uint64(m.RemoteCommID))
	mraMessageMRAed.Set(d, uint64(m.MessageMRAed))
	mraServiceTimeout.Set(d, uint64(m.ServiceTimeout))
	mraPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from an MRA body.
func (m *MRA) Decode(d []byte) error {
	if err := checkLen(d, "MRA"); err != nil {
		return err
	}
	m.LocalCommID = uint32(mraLocalCommID.Get(d))
	m.RemoteCommID = uint32(mraRemoteCommID.Get(d))
	m.MessageMRAed = MsgType(mraMessageMRAed.Get(d))
	m.ServiceTimeout = Timeout(mraServiceTimeout.Get(d))
	m.PrivateData = mraPrivateData.Bytes(d)
	return nil
}

// REJ is the Reject message (Table 108).
type REJ struct {
	LocalCommID     uint32
	RemoteCommID    uint32
	MessageRejected MsgType // 2 bits
	Reason          RejectReason
	ARI             []byte // additional reject info, up to 72 bytes; its length is RejectedInfoLength
	PrivateData     []byte // up to 148 bytes
}

// AttrID returns [AttrREJ].
func (m *REJ) AttrID() AttrID { return AttrREJ }

// Len returns [CMDataSize].
func (m *REJ) Len() int { return CMDataSize }

// Validate checks the ARI and private-data sizes.
func (m *REJ) Validate() error {
	if err := checkFit("REJ", rejARI, m.ARI); err != nil {
		return err
	}
	return checkFit("REJ", rejPrivateData, m.PrivateData)
}

// Append appends the encoded REJ body.
func (m *REJ) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	rejLocalCommID.Set(d, uint64(m.LocalCommID))
	rejRemoteCommID.Set(d, uint64(m.RemoteCommID))
	rejMessageRejected.Set(d, uint64(m.MessageRejected))
	n := rejARI.putBytes(d, m.ARI)
	rejRejectedInfoLength.Set(d, uint64(n))
	rejReason.Set(d, uint64(m.Reason))
	rejPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a REJ body. ARI is cut to RejectedInfoLength
// (clamped to 72).
func (m *REJ) Decode(d []byte) error {
	if err := checkLen(d, "REJ"); err != nil {
		return err
	}
	m.LocalCommID = uint32(rejLocalCommID.Get(d))
	m.RemoteCommID = uint32(rejRemoteCommID.Get(d))
	m.MessageRejected = MsgType(rejMessageRejected.Get(d))
	m.Reason = RejectReason(rejReason.Get(d))
	n := min(int(rejRejectedInfoLength.Get(d)), REJARISize)
	m.ARI = rejARI.Bytes(d)[:n]
	m.PrivateData = rejPrivateData.Bytes(d)
	return nil
}

// REP is the Connection Reply (Table 110).
type REP struct {
	LocalCommID        uint32
	RemoteCommID       uint32
	LocalQKey          uint32
	LocalQPN           uint32 // 24 bits
	VendorID           uint32 // ECE vendor ID, 24 bits split over three reserved bytes
	LocalEECN          uint32
	StartingPSN        uint32 // 24 bits
	ResponderResources uint8
	InitiatorDepth     uint8
	TargetAckDelay     Timeout
	FailoverAccepted   uint8 // 2 bits
	E2EFlowControl     bool
	RNRRetryCount      uint8 // 3 bits
	SRQ                bool
	LocalCAGUID        uint64
	PrivateData        []byte // up to 196 bytes
}

// AttrID returns [AttrREP].
func (m *REP) AttrID() AttrID { return AttrREP }

// Len returns [CMDataSize].
func (m *REP) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *REP) Validate() error { return checkFit("REP", repPrivateData, m.PrivateData) }

// Append appends the encoded REP body.
func (m *REP) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	repLocalCommID.Set(d, uint64(m.LocalCommID))
	repRemoteCommID.Set(d, uint64(m.RemoteCommID))
	repLocalQKey.Set(d, uint64(m.LocalQKey))
	repLocalQPN.Set(d, uint64(m.LocalQPN))
	repVendorIDH.Set(d, uint64(m.VendorID>>16))
	repLocalEECN.Set(d, uint64(m.LocalEECN))
	repVendorIDM.Set(d, uint64(m.VendorID>>8))
	repStartingPSN.Set(d, uint64(m.StartingPSN))
	repVendorIDL.Set(d, uint64(m.VendorID))
	repResponderResources.Set(d, uint64(m.ResponderResources))
	repInitiatorDepth.Set(d, uint64(m.InitiatorDepth))
	repTargetAckDelay.Set(d, uint64(m.TargetAckDelay))
	repFailoverAccepted.Set(d, uint64(m.FailoverAccepted))
	repE2EFlowControl.setBool(d, m.E2EFlowControl)
	repRNRRetryCount.Set(d, uint64(m.RNRRetryCount))
	repSRQ.setBool(d, m.SRQ)
	repLocalCAGUID.Set(d, m.LocalCAGUID)
	repPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a REP body.
func (m *REP) Decode(d []byte) error {
	if err := checkLen(d, "REP"); err != nil {
		return err
	}
	m.LocalCommID = uint32(repLocalCommID.Get(d))
	m.RemoteCommID = uint32(repRemoteCommID.Get(d))
	m.LocalQKey = uint32(repLocalQKey.Get(d))
	m.LocalQPN = uint32(repLocalQPN.Get(d))
	m.VendorID = uint32(repVendorIDH.Get(d)<<16 | repVendorIDM.Get(d)<<8 | repVendorIDL.Get(d))
	m.LocalEECN = uint32(repLocalEECN.Get(d))
	m.StartingPSN = uint32(repStartingPSN.Get(d))
	m.ResponderResources = uint8(repResponderResources.Get(d))
	m.InitiatorDepth = uint8(repInitiatorDepth.Get(d))
	m.TargetAckDelay = Timeout(repTargetAckDelay.Get(d))
	m.FailoverAccepted = uint8(repFailoverAccepted.Get(d))
	m.E2EFlowControl = repE2EFlowControl.bool(d)
	m.RNRRetryCount = uint8(repRNRRetryCount.Get(d))
	m.SRQ = repSRQ.bool(d)
	m.LocalCAGUID = repLocalCAGUID.Get(d)
	m.PrivateData = repPrivateData.Bytes(d)
	return nil
}

// RTU is the Ready To Use message (Table 111).
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // up to 224 bytes
}

// AttrID returns [AttrRTU].
func (m *RTU) AttrID() AttrID { return AttrRTU }

// Len returns [CMDataSize].
func (m *RTU) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *RTU) Validate() error { return checkFit("RTU", rtuPrivateData, m.PrivateData) }

// Append appends the encoded RTU body.
func (m *RTU) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	rtuLocalCommID.Set(d, uint64(m.LocalCommID))
	rtuRemoteCommID.Set(d, uint64(m.RemoteCommID))
	rtuPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from an RTU body.
func (m *RTU) Decode(d []byte) error {
	if err := checkLen(d, "RTU"); err != nil {
		return err
	}
	m.LocalCommID = uint32(rtuLocalCommID.Get(d))
	m.RemoteCommID = uint32(rtuRemoteCommID.Get(d))
	m.PrivateData = rtuPrivateData.Bytes(d)
	return nil
}

// DREQ is the Disconnection Request (Table 112).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits
	PrivateData  []byte // up to 220 bytes
}

// AttrID returns [AttrDREQ].
func (m *DREQ) AttrID() AttrID { return AttrDREQ }

// Len returns [CMDataSize].
func (m *DREQ) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *DREQ) Validate() error { return checkFit("DREQ", dreqPrivateData, m.PrivateData) }

// Append appends the encoded DREQ body.
func (m *DREQ) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	dreqLocalCommID.Set(d, uint64(m.LocalCommID))
	dreqRemoteCommID.Set(d, uint64(m.RemoteCommID))
	dreqRemoteQPN.Set(d, uint64(m.RemoteQPN))
	dreqPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a DREQ body.
func (m *DREQ) Decode(d []byte) error {
	if err := checkLen(d, "DREQ"); err != nil {
		return err
	}
	m.LocalCommID = uint32(dreqLocalCommID.Get(d))
	m.RemoteCommID = uint32(dreqRemoteCommID.Get(d))
	m.RemoteQPN = uint32(dreqRemoteQPN.Get(d))
	m.PrivateData = dreqPrivateData.Bytes(d)
	return nil
}

// DREP is the Disconnection Reply (Table 113).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // up to 224 bytes
}

// AttrID returns [AttrDREP].
func (m *DREP) AttrID() AttrID { return AttrDREP }

// Len returns [CMDataSize].
func (m *DREP) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *DREP) Validate() error { return checkFit("DREP", drepPrivateData, m.PrivateData) }

// Append appends the encoded DREP body.
func (m *DREP) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	drepLocalCommID.Set(d, uint64(m.LocalCommID))
	drepRemoteCommID.Set(d, uint64(m.RemoteCommID))
	drepPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a DREP body.
func (m *DREP) Decode(d []byte) error {
	if err := checkLen(d, "DREP"); err != nil {
		return err
	}
	m.LocalCommID = uint32(drepLocalCommID.Get(d))
	m.RemoteCommID = uint32(drepRemoteCommID.Get(d))
	m.PrivateData = drepPrivateData.Bytes(d)
	return nil
}

// LAP is the Load Alternate Path request (Table 115).
type LAP struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               uint32 // 24 bits
	RemoteCMResponseTimeout Timeout
	Alternate               Path
	PrivateData             []byte // up to 168 bytes
}

// AttrID returns [AttrLAP].
func (m *LAP) AttrID() AttrID { return AttrLAP }

// Len returns [CMDataSize].
func (m *LAP) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *LAP) Validate() error { return checkFit("LAP", lapPrivateData, m.PrivateData) }

// Append appends the encoded LAP body.
func (m *LAP) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	lapLocalCommID.Set(d, uint64(m.LocalCommID))
	lapRemoteCommID.Set(d, uint64(m.RemoteCommID))
	lapRemoteQPN.Set(d, uint64(m.RemoteQPN))
	lapRemoteCMRespTO.Set(d, uint64(m.RemoteCMResponseTimeout))
	lapAlternate.put(d, &m.Alternate)
	lapPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a LAP body.
func (m *LAP) Decode(d []byte) error {
	if err := checkLen(d, "LAP"); err != nil {
		return err
	}
	m.LocalCommID = uint32(lapLocalCommID.Get(d))
	m.RemoteCommID = uint32(lapRemoteCommID.Get(d))
	m.RemoteQPN = uint32(lapRemoteQPN.Get(d))
	m.RemoteCMResponseTimeout = Timeout(lapRemoteCMRespTO.Get(d))
	lapAlternate.get(d, &m.Alternate)
	m.PrivateData = lapPrivateData.Bytes(d)
	return nil
}

// APR is the Alternate Path Response (Table 116).
type APR struct {
	LocalCommID  uint32
	RemoteCommID uint32
	Status       APStatus
	Info         []byte // additional info, up to 72 bytes; its length is AdditionalInfoLength
	PrivateData  []byte // up to 148 bytes
}

// AttrID returns [AttrAPR].
func (m *APR) AttrID() AttrID { return AttrAPR }

// Len returns [CMDataSize].
func (m *APR) Len() int { return CMDataSize }

// Validate checks the info and private-data sizes.
func (m *APR) Validate() error {
	if err := checkFit("APR", aprInfo, m.Info); err != nil {
		return err
	}
	return checkFit("APR", aprPrivateData, m.PrivateData)
}

// Append appends the encoded APR body.
func (m *APR) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	aprLocalCommID.Set(d, uint64(m.LocalCommID))
	aprRemoteCommID.Set(d, uint64(m.RemoteCommID))
	n := aprInfo.putBytes(d, m.Info)
	aprInfoLength.Set(d, uint64(n))
	aprStatus.Set(d, uint64(m.Status))
	aprPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from an APR body.
func (m *APR) Decode(d []byte) error {
	if err := checkLen(d, "APR"); err != nil {
		return err
	}
	m.LocalCommID = uint32(aprLocalCommID.Get(d))
	m.RemoteCommID = uint32(aprRemoteCommID.Get(d))
	m.Status = APStatus(aprStatus.Get(d))
	n := min(int(aprInfoLength.Get(d)), APRInfoSize)
	m.Info = aprInfo.Bytes(d)[:n]
	m.PrivateData = aprPrivateData.Bytes(d)
	return nil
}

// SIDRREQ is the Service ID Resolution Request (Table 119).
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // up to 216 bytes
}

// AttrID returns [AttrSIDRREQ].
func (m *SIDRREQ) AttrID() AttrID { return AttrSIDRREQ }

// Len returns [CMDataSize].
func (m *SIDRREQ) Len() int { return CMDataSize }

// Validate checks the private-data size.
func (m *SIDRREQ) Validate() error {
	return checkFit("SIDR_REQ", sidrReqPrivateData, m.PrivateData)
}

// Append appends the encoded SIDR_REQ body.
func (m *SIDRREQ) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	sidrReqRequestID.Set(d, uint64(m.RequestID))
	sidrReqPKey.Set(d, uint64(m.PKey))
	sidrReqServiceID.Set(d, m.ServiceID)
	sidrReqPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a SIDR_REQ body.
func (m *SIDRREQ) Decode(d []byte) error {
	if err := checkLen(d, "SIDR_REQ"); err != nil {
		return err
	}
	m.RequestID = uint32(sidrReqRequestID.Get(d))
	m.PKey = uint16(sidrReqPKey.Get(d))
	m.ServiceID = sidrReqServiceID.Get(d)
	m.PrivateData = sidrReqPrivateData.Bytes(d)
	return nil
}

// SIDRREP is the Service ID Resolution Response (Table 120).
type SIDRREP struct {
	RequestID   uint32
	Status      SIDRStatus
	VendorID    uint32 // ECE vendor ID, 24 bits split over reserved bytes
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        []byte // additional info, up to 72 bytes; its length is AdditionalInfoLength
	PrivateData []byte // up to 136 bytes
}

// AttrID returns [AttrSIDRREP].
func (m *SIDRREP) AttrID() AttrID { return AttrSIDRREP }

// Len returns [CMDataSize].
func (m *SIDRREP) Len() int { return CMDataSize }

// Validate checks the info and private-data sizes.
func (m *SIDRREP) Validate() error {
	if err := checkFit("SIDR_REP", sidrRepInfo, m.Info); err != nil {
		return err
	}
	return checkFit("SIDR_REP", sidrRepPrivateData, m.PrivateData)
}

// Append appends the encoded SIDR_REP body.
func (m *SIDRREP) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	sidrRepRequestID.Set(d, uint64(m.RequestID))
	sidrRepStatus.Set(d, uint64(m.Status))
	n := sidrRepInfo.putBytes(d, m.Info)
	sidrRepInfoLength.Set(d, uint64(n))
	sidrRepVendorIDH.Set(d, uint64(m.VendorID>>8))
	sidrRepQPN.Set(d, uint64(m.QPN))
	sidrRepVendorIDL.Set(d, uint64(m.VendorID))
	sidrRepServiceID.Set(d, m.ServiceID)
	sidrRepQKey.Set(d, uint64(m.QKey))
	sidrRepPrivateData.putBytes(d, m.PrivateData)
	return b
}

// Decode fills m from a SIDR_REP body.
func (m *SIDRREP) Decode(d []byte) error {
	if err := checkLen(d, "SIDR_REP"); err != nil {
		return err
	}
	m.RequestID = uint32(sidrRepRequestID.Get(d))
	m.Status = SIDRStatus(sidrRepStatus.Get(d))
	m.VendorID = uint32(sidrRepVendorIDH.Get(d)<<8 | sidrRepVendorIDL.Get(d))
	m.QPN = uint32(sidrRepQPN.Get(d))
	m.ServiceID = sidrRepServiceID.Get(d)
	m.QKey = uint32(sidrRepQKey.Get(d))
	n := min(int(sidrRepInfoLength.Get(d)), SIDRREPInfoSize)
	m.Info = sidrRepInfo.Bytes(d)[:n]
	m.PrivateData = sidrRepPrivateData.Bytes(d)
	return nil
}
