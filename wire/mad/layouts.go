package mad

// Field tables of the CM messages, IBTA Vol 1 §12.6 Tables 106–120
// (ib-cm.md §4). Offsets are relative to the CM data area (MAD byte 24).

// pathFields locates one path description inside a message. REQ carries
// two (primary, alternate) in one layout; LAP carries an alternate path in
// a different order.
type pathFields struct {
	LocalLID, RemoteLID, LocalGID, RemoteGID      Field
	FlowLabel, PacketRate, TrafficClass, HopLimit Field
	SL, SubnetLocal, LocalAckTimeout              Field
}

// reqPath returns the REQ path layout (44 bytes) starting at base.
func reqPath(prefix string, base int) pathFields {
	return pathFields{
		LocalLID:        Field{prefix + "LocalLID", base, 0, 16},
		RemoteLID:       Field{prefix + "RemoteLID", base + 2, 0, 16},
		LocalGID:        Field{prefix + "LocalGID", base + 4, 0, 128},
		RemoteGID:       Field{prefix + "RemoteGID", base + 20, 0, 128},
		FlowLabel:       Field{prefix + "FlowLabel", base + 36, 0, 20},
		PacketRate:      Field{prefix + "PacketRate", base + 39, 2, 6},
		TrafficClass:    Field{prefix + "TrafficClass", base + 40, 0, 8},
		HopLimit:        Field{prefix + "HopLimit", base + 41, 0, 8},
		SL:              Field{prefix + "SL", base + 42, 0, 4},
		SubnetLocal:     Field{prefix + "SubnetLocal", base + 42, 4, 1},
		LocalAckTimeout: Field{prefix + "LocalAckTimeout", base + 43, 0, 5},
	}
}

func (f *pathFields) list() []Field {
	return []Field{f.LocalLID, f.RemoteLID, f.LocalGID, f.RemoteGID, f.FlowLabel,
		f.PacketRate, f.TrafficClass, f.HopLimit, f.SL, f.SubnetLocal, f.LocalAckTimeout}
}

// REQ, Table 106.
var (
	reqLocalCommID        = Field{"LocalCommID", 0, 0, 32}
	reqVendorID           = Field{"VendorID", 5, 0, 24}
	reqServiceID          = Field{"ServiceID", 8, 0, 64}
	reqLocalCAGUID        = Field{"LocalCAGUID", 16, 0, 64}
	reqLocalQKey          = Field{"LocalQKey", 28, 0, 32}
	reqLocalQPN           = Field{"LocalQPN", 32, 0, 24}
	reqResponderResources = Field{"ResponderResources", 35, 0, 8}
	reqLocalEECN          = Field{"LocalEECN", 36, 0, 24}
	reqInitiatorDepth     = Field{"InitiatorDepth", 39, 0, 8}
	reqRemoteEECN         = Field{"RemoteEECN", 40, 0, 24}
	reqRemoteCMRespTO     = Field{"RemoteCMResponseTimeout", 43, 0, 5}
	reqTransportType      = Field{"TransportServiceType", 43, 5, 2}
	reqE2EFlowControl     = Field{"EndToEndFlowControl", 43, 7, 1}
	reqStartingPSN        = Field{"StartingPSN", 44, 0, 24}
	reqLocalCMRespTO      = Field{"LocalCMResponseTimeout", 47, 0, 5}
	reqRetryCount         = Field{"RetryCount", 47, 5, 3}
	reqPKey               = Field{"PKey", 48, 0, 16}
	reqPathMTU            = Field{"PathMTU", 50, 0, 4}
	reqRDCExists          = Field{"RDCExists", 50, 4, 1}
	reqRNRRetryCount      = Field{"RNRRetryCount", 50, 5, 3}
	reqMaxCMRetries       = Field{"MaxCMRetries", 51, 0, 4}
	reqSRQ                = Field{"SRQ", 51, 4, 1}
	reqExtTransportType   = Field{"ExtendedTransportType", 51, 5, 3}
	reqPrimary            = reqPath("Primary", 52)
	reqAlternate          = reqPath("Alternate", 96)
	reqSAPSupported       = Field{"SAPSupported", 139, 5, 1}
	reqPrivateData        = Field{"PrivateData", 140, 0, REQPrivateDataSize * 8}
)

// MRA, Table 107.
var (
	mraLocalCommID    = Field{"LocalCommID", 0, 0, 32}
	mraRemoteCommID   = Field{"RemoteCommID", 4, 0, 32}
	mraMessageMRAed   = Field{"MessageMRAed", 8, 0, 2}
	mraServiceTimeout = Field{"ServiceTimeout", 9, 0, 5}
	mraPrivateData    = Field{"PrivateData", 10, 0, MRAPrivateDataSize * 8}
)

// REJ, Table 108.
var (
	rejLocalCommID        = Field{"LocalCommID", 0, 0, 32}
	rejRemoteCommID       = Field{"RemoteCommID", 4, 0, 32}
	rejMessageRejected    = Field{"MessageRejected", 8, 0, 2}
	rejRejectedInfoLength = Field{"RejectedInfoLength", 9, 0, 7}
	rejReason             = Field{"Reason", 10, 0, 16}
	rejARI                = Field{"ARI", 12, 0, REJARISize * 8}
	rejPrivateData        = Field{"PrivateData", 84, 0, REJPrivateDataSize * 8}
)

// REP, Table 110. The ECE vendor ID is split over three reserved bytes.
var (
	repLocalCommID        = Field{"LocalCommID", 0, 0, 32}
	repRemoteCommID       = Field{"RemoteCommID", 4, 0, 32}
	repLocalQKey          = Field{"LocalQKey", 8, 0, 32}
	repLocalQPN           = Field{"LocalQPN", 12, 0, 24}
	repVendorIDH          = Field{"VendorIDHigh", 15, 0, 8}
	repLocalEECN          = Field{"LocalEECN", 16, 0, 24}
	repVendorIDM          = Field{"VendorIDMid", 19, 0, 8}
	repStartingPSN        = Field{"StartingPSN", 20, 0, 24}
	repVendorIDL          = Field{"VendorIDLow", 23, 0, 8}
	repResponderResources = Field{"ResponderResources", 24, 0, 8}
	repInitiatorDepth     = Field{"InitiatorDepth", 25, 0, 8}
	repTargetAckDelay     = Field{"TargetAckDelay", 26, 0, 5}
	repFailoverAccepted   = Field{"FailoverAccepted", 26, 5, 2}
	repE2EFlowControl     = Field{"EndToEndFlowControl", 26, 7, 1}
	repRNRRetryCount      = Field{"RNRRetryCount", 27, 0, 3}
	repSRQ                = Field{"SRQ", 27, 3, 1}
	repLocalCAGUID        = Field{"LocalCAGUID", 28, 0, 64}
	repPrivateData        = Field{"PrivateData", 36, 0, REPPrivateDataSize * 8}
)

// RTU, DREQ, DREP, Tables 111–113.
var (
	rtuLocalCommID   = Field{"LocalCommID", 0, 0, 32}
	rtuRemoteCommID  = Field{"RemoteCommID", 4, 0, 32}
	rtuPrivateData   = Field{"PrivateData", 8, 0, RTUPrivateDataSize * 8}
	dreqLocalCommID  = Field{"LocalCommID", 0, 0, 32}
	dreqRemoteCommID = Field{"RemoteCommID", 4, 0, 32}
	dreqRemoteQPN    = Field{"RemoteQPN", 8, 0, 24}
	dreqPrivateData  = Field{"PrivateData", 12, 0, DREQPrivateDataSize * 8}
	drepLocalCommID  = Field{"LocalCommID", 0, 0, 32}
	drepRemoteCommID = Field{"RemoteCommID", 4, 0, 32}
	drepPrivateData  = Field{"PrivateData", 8, 0, DREPPrivateDataSize * 8}
)

// LAP, Table 115. The alternate path has its own field order.
var (
	lapLocalCommID    = Field{"LocalCommID", 0, 0, 32}
	lapRemoteCommID   = Field{"RemoteCommID", 4, 0, 32}
	lapRemoteQPN      = Field{"RemoteQPN", 12, 0, 24}
	lapRemoteCMRespTO = Field{"RemoteCMResponseTimeout", 15, 0, 5}
	lapAlternate      = pathFields{
		LocalLID:        Field{"AlternateLocalLID", 20, 0, 16},
		RemoteLID:       Field{"AlternateRemoteLID", 22, 0, 16},
		LocalGID:        Field{"AlternateLocalGID", 24, 0, 128},
		RemoteGID:       Field{"AlternateRemoteGID", 40, 0, 128},
		FlowLabel:       Field{"AlternateFlowLabel", 56, 0, 20},
		TrafficClass:    Field{"AlternateTrafficClass", 59, 0, 8},
		HopLimit:        Field{"AlternateHopLimit", 60, 0, 8},
		PacketRate:      Field{"AlternatePacketRate", 61, 2, 6},
		SL:              Field{"AlternateSL", 62, 0, 4},
		SubnetLocal:     Field{"AlternateSubnetLocal", 62, 4, 1},
		LocalAckTimeout: Field{"AlternateLocalAckTimeout", 63, 0, 5},
	}
	lapPrivateData = Field{"PrivateData", 64, 0, LAPPrivateDataSize * 8}
)

// APR, Table 116.
var (
	aprLocalCommID  = Field{"LocalCommID", 0, 0, 32}
	aprRemoteCommID = Field{"RemoteCommID", 4, 0, 32}
	aprInfoLength   = Field{"AdditionalInfoLength", 8, 0, 8}
	aprStatus       = Field{"APStatus", 9, 0, 8}
	aprInfo         = Field{"AdditionalInfo", 12, 0, APRInfoSize * 8}
	aprPrivateData  = Field{"PrivateData", 84, 0, APRPrivateDataSize * 8}
)

// SIDR_REQ and SIDR_REP, Tables 119–120.
var (
	sidrReqRequestID   = Field{"RequestID", 0, 0, 32}
	sidrReqPKey        = Field{"PKey", 4, 0, 16}
	sidrReqServiceID   = Field{"ServiceID", 8, 0, 64}
	sidrReqPrivateData = Field{"PrivateData", 16, 0, SIDRREQPrivateDataSize * 8}
	sidrRepRequestID   = Field{"RequestID", 0, 0, 32}
	sidrRepStatus      = Field{"Status", 4, 0, 8}
	sidrRepInfoLength  = Field{"AdditionalInfoLength", 5, 0, 8}
	sidrRepVendorIDH   = Field{"VendorIDHigh", 6, 0, 16}
	sidrRepQPN         = Field{"QPN", 8, 0, 24}
	sidrRepVendorIDL   = Field{"VendorIDLow", 11, 0, 8}
	sidrRepServiceID   = Field{"ServiceID", 12, 0, 64}
	sidrRepQKey        = Field{"QKey", 20, 0, 32}
	sidrRepInfo        = Field{"AdditionalInfo", 24, 0, SIDRREPInfoSize * 8}
	sidrRepPrivateData = Field{"PrivateData", 96, 0, SIDRREPPrivateDataSize * 8}
)

// ClassPortInfo (IBTA Vol 1 §13.4.8.1), 72 bytes of attribute data.
var (
	cpiBaseVersion      = Field{"BaseVersion", 0, 0, 8}
	cpiClassVersion     = Field{"ClassVersion", 1, 0, 8}
	cpiCapabilityMask   = Field{"CapabilityMask", 2, 0, 16}
	cpiCapabilityMask2  = Field{"CapabilityMask2", 4, 0, 27}
	cpiRespTimeValue    = Field{"RespTimeValue", 7, 3, 5}
	cpiRedirectGID      = Field{"RedirectGID", 8, 0, 128}
	cpiRedirectTC       = Field{"RedirectTC", 24, 0, 8}
	cpiRedirectSL       = Field{"RedirectSL", 25, 0, 4}
	cpiRedirectFL       = Field{"RedirectFL", 25, 4, 20}
	cpiRedirectLID      = Field{"RedirectLID", 28, 0, 16}
	cpiRedirectPKey     = Field{"RedirectPKey", 30, 0, 16}
	cpiRedirectQP       = Field{"RedirectQP", 33, 0, 24}
	cpiRedirectQKey     = Field{"RedirectQKey", 36, 0, 32}
	cpiTrapGID          = Field{"TrapGID", 40, 0, 128}
	cpiTrapTC           = Field{"TrapTC", 56, 0, 8}
	cpiTrapSL           = Field{"TrapSL", 57, 0, 4}
	cpiTrapFL           = Field{"TrapFL", 57, 4, 20}
	cpiTrapLID          = Field{"TrapLID", 60, 0, 16}
	cpiTrapPKey         = Field{"TrapPKey", 62, 0, 16}
	cpiTrapHL           = Field{"TrapHL", 64, 0, 8}
	cpiTrapQP           = Field{"TrapQP", 65, 0, 24}
	cpiTrapQKey         = Field{"TrapQKey", 68, 0, 32}
	classPortInfoFields = []Field{cpiBaseVersion, cpiClassVersion, cpiCapabilityMask,
		cpiCapabilityMask2, cpiRespTimeValue, cpiRedirectGID, cpiRedirectTC, cpiRedirectSL,
		cpiRedirectFL, cpiRedirectLID, cpiRedirectPKey, cpiRedirectQP, cpiRedirectQKey,
		cpiTrapGID, cpiTrapTC, cpiTrapSL, cpiTrapFL, cpiTrapLID, cpiTrapPKey, cpiTrapHL,
		cpiTrapQP, cpiTrapQKey}
)

// ClassPortInfoSize is the size of the ClassPortInfo attribute.
const ClassPortInfoSize = 72

func concat(parts ...[]Field) []Field {
	var out []Field
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// layouts is the attribute table: one field table per CM attribute.
var layouts = [...]Layout{
	{Name: "ClassPortInfo", Attr: AttrClassPortInfo, Size: ClassPortInfoSize, Fields: classPortInfoFields},
	{Name: "REQ", Attr: AttrREQ, Size: CMDataSize, Fields: concat(
		[]Field{reqLocalCommID, reqVendorID, reqServiceID, reqLocalCAGUID, reqLocalQKey,
			reqLocalQPN, reqResponderResources, reqLocalEECN, reqInitiatorDepth, reqRemoteEECN,
			reqRemoteCMRespTO, reqTransportType, reqE2EFlowControl, reqStartingPSN,
			reqLocalCMRespTO, reqRetryCount, reqPKey, reqPathMTU, reqRDCExists,
			reqRNRRetryCount, reqMaxCMRetries, reqSRQ, reqExtTransportType},
		reqPrimary.list(), reqAlternate.list(),
		[]Field{reqSAPSupported, reqPrivateData})},
	{Name: "MRA", Attr: AttrMRA, Size: CMDataSize, Fields: []Field{
		mraLocalCommID, mraRemoteCommID, mraMessageMRAed, mraServiceTimeout, mraPrivateData}},
	{Name: "REJ", Attr: AttrREJ, Size: CMDataSize, Fields: []Field{
		rejLocalCommID, rejRemoteCommID, rejMessageRejected, rejRejectedInfoLength,
		rejReason, rejARI, rejPrivateData}},
	{Name: "REP", Attr: AttrREP, Size: CMDataSize, Fields: []Field{
		repLocalCommID, repRemoteCommID, repLocalQKey, repLocalQPN, repVendorIDH,
		repLocalEECN, repVendorIDM, repStartingPSN, repVendorIDL, repResponderResources,
		repInitiatorDepth, repTargetAckDelay, repFailoverAccepted, repE2EFlowControl,
		repRNRRetryCount, repSRQ, repLocalCAGUID, repPrivateData}},
	{Name: "RTU", Attr: AttrRTU, Size: CMDataSize, Fields: []Field{
		rtuLocalCommID, rtuRemoteCommID, rtuPrivateData}},
	{Name: "DREQ", Attr: AttrDREQ, Size: CMDataSize, Fields: []Field{
		dreqLocalCommID, dreqRemoteCommID, dreqRemoteQPN, dreqPrivateData}},
	{Name: "DREP", Attr: AttrDREP, Size: CMDataSize, Fields: []Field{
		drepLocalCommID, drepRemoteCommID, drepPrivateData}},
	{Name: "SIDR_REQ", Attr: AttrSIDRREQ, Size: CMDataSize, Fields: []Field{
		sidrReqRequestID, sidrReqPKey, sidrReqServiceID, sidrReqPrivateData}},
	{Name: "SIDR_REP", Attr: AttrSIDRREP, Size: CMDataSize, Fields: []Field{
		sidrRepRequestID, sidrRepStatus, sidrRepInfoLength, sidrRepVendorIDH, sidrRepQPN,
		sidrRepVendorIDL, sidrRepServiceID, sidrRepQKey, sidrRepInfo, sidrRepPrivateData}},
	{Name: "LAP", Attr: AttrLAP, Size: CMDataSize, Fields: concat(
		[]Field{lapLocalCommID, lapRemoteCommID, lapRemoteQPN, lapRemoteCMRespTO},
		[]Field{lapAlternate.LocalLID, lapAlternate.RemoteLID, lapAlternate.LocalGID,
			lapAlternate.RemoteGID, lapAlternate.FlowLabel, lapAlternate.TrafficClass,
			lapAlternate.HopLimit, lapAlternate.PacketRate, lapAlternate.SL,
			lapAlternate.SubnetLocal, lapAlternate.LocalAckTimeout},
		[]Field{lapPrivateData})},
	{Name: "APR", Attr: AttrAPR, Size: CMDataSize, Fields: []Field{
		aprLocalCommID, aprRemoteCommID, aprInfoLength, aprStatus, aprInfo, aprPrivateData}},
}

func layoutOf(a AttrID) *Layout {
	for i := range layouts {
		if layouts[i].Attr == a {
			return &layouts[i]
		}
	}
	return nil
}

// LayoutOf returns a copy of the field table of a CM attribute, or false
// for an unknown attribute. Offsets are relative to the attribute data
// (MAD byte 24).
func LayoutOf(a AttrID) (Layout, bool) {
	l := layoutOf(a)
	if l == nil {
		return Layout{}, false
	}
	c := *l
	c.Fields = append([]Field(nil), l.Fields...)
	return c, true
}

// HeaderLayout returns a copy of the MAD common header field table.
func HeaderLayout() Layout {
	c := headerLayout
	c.Fields = append([]Field(nil), headerLayout.Fields...)
	return c
}

// Attrs lists every attribute with a layout, in table order.
func Attrs() []AttrID {
	out := make([]AttrID, len(layouts))
	for i := range layouts {
		out[i] = layouts[i].Attr
	}
	return out
}
