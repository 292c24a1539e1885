package verbs

import (
	"io"
	"net/netip"
	"time"
)

// DeviceConfig selects and configures a device for Open. The zero value of
// each field means the default.
type DeviceConfig struct {
	// Provider names the registered provider; "" means the only (or first
	// registered) one.
	Provider string
	// Name is the device name reported by Device.Name (default "rxe0").
	Name string
	// Addr is the local IP address (IPv4 or IPv6) the device binds; its
	// GIDs derive from it. Required.
	Addr netip.Addr
	// Port is the local UDP port (default 4791). Processes sharing a host
	// use different addresses (127.0.0.2, 127.0.0.3, ...) or ports.
	Port uint16
	// NetMTU is the link MTU the device assumes (default: the MTU of the
	// interface holding Addr, as rdma_rxe takes its netdev's; 1500 when
	// there is none); the port's active MTU is the largest IB MTU not
	// above NetMTU-80, as rxe does: 4096 on loopback and jumbo links,
	// 1024 on a 1500-byte Ethernet link.
	NetMTU int
	// BusyPoll makes the device poll its socket without parking, trading a
	// CPU core for latency.
	BusyPoll bool
	// NoRxCoalescing turns off receive coalescing (UDP GRO on rxe), which
	// raises bandwidth. It is not needed for low latency: an application
	// spinning on its CQ reads the socket itself either way (rxe's
	// receive token splits coalesced datagrams too), and measured
	// ping-pong latency is no worse with coalescing on. It remains for
	// comparisons and for peers whose bursts should be received packet
	// by packet.
	NoRxCoalescing bool
	// RxShards is the number of receive sockets a Soft-RoCE device binds
	// to its address (SO_REUSEPORT), each read by its own goroutine, so
	// that receive uses several cores; the kernel keeps every flow (a
	// peer QP's source port) on one. 0 means GOMAXPROCS on Linux, 1
	// elsewhere; a count the device cannot honour fails Open.
	RxShards int
	// ECN turns on RoCEv2 congestion signalling on a Soft-RoCE device
	// (ECT(0) on every packet, CNPs for CE-marked ones, a DCQCN rate
	// limiter per QP, with rxe.ECNConfig's defaults). Off by default, as
	// on Linux rxe; a kernel device's congestion control is its driver's
	// (the ibverbs provider refuses it).
	ECN bool
	// FixedSourcePort makes every packet leave from the device's own UDP
	// port. By default (false) each QP sends from the source port Linux
	// rxe would use (0xC000 + a hash of the QPN, or of the connected QPN
	// pair), through a send-only socket per port, so that fabrics spread
	// QPs over ECMP paths and captures match kernel rxe; a QP whose port
	// cannot be bound falls back to the device port.
	FixedSourcePort bool
	// Capture, when set, receives a pcap capture file (link type raw
	// IP) of every RoCEv2 packet the device sends and receives, one
	// record per packet, with the IP and UDP headers synthesised (a
	// UDP socket shows neither). The file header is the first Write,
	// each record one Write after it. It is written synchronously from
	// the data path: buffer it (bufio) and flush it after Close.
	Capture io.Writer
}

// DeviceAttr are a device's capabilities (ibv_device_attr).
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        uint64
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEERdAtom           int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	MaxEEInitRdAtom       int
	AtomicCap             AtomicCap
	MaxEE                 int
	MaxRDD                int
	MaxMW                 int
	MaxRawIPv6QP          int
	MaxRawEthyQP          int
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxFMR                int
	MaxMapPerFMR          int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              int
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
	MaxInlineData         int
	MaxMsgSize            uint64
	// MaxFastRegPageListLen is the most pages one fast-registration MR
	// maps (max_fast_reg_page_list_len; 0 without
	// DeviceMemMgtExtensions).
	MaxFastRegPageListLen int
}

// AtomicCap is the atomicity guarantee of a device (ibv_atomic_cap).
type AtomicCap uint8

// Atomic capabilities.
const (
	AtomicNone AtomicCap = iota
	AtomicHCA
	AtomicGlob
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "ATOMIC_NONE"
}

// LinkLayer is the link layer of a port.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = iota
	LinkLayerInfiniBand
	LinkLayerEthernet
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unspecified"
}

// PortAttr are a port's attributes (ibv_port_attr).
type PortAttr struct {
	State         PortState
	MaxMTU        MTU
	ActiveMTU     MTU
	GIDTblLen     int
	PortCapFlags  uint32
	MaxMsgSize    uint64
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     LinkLayer
}

// GIDType is the kind of a GID table entry.
type GIDType uint8

// GID types.
const (
	GIDTypeIB GIDType = iota
	GIDTypeRoCEv1
	GIDTypeRoCEv2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "IB"
}

// GIDEntry is one populated GID table entry.
type GIDEntry struct {
	Index int
	GID   GID
	Type  GIDType
}

// GlobalRoute is the GRH part of an address vector (ibv_global_route).
// For RoCEv2 the DGID is the destination IP address (IPv4-mapped for IPv4).
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (ibv_ah_attr).
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
	// DPort is a softib extension: the destination UDP port when the peer
	// device does not listen on 4791 (several softib processes on one
	// host). 0 means 4791, which every real RoCEv2 device uses.
	DPort uint16
}

// QPCap are the queue sizes of a QP (ibv_qp_cap). Providers may round up and
// report the actual values back.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr creates a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ CQ
	RecvCQ CQ
	SRQ    SRQ
	Cap    QPCap
	// SigAll makes every send WR generate a completion, as if
	// SendSignaled were always set.
	SigAll bool
	// Context is returned unchanged by QP.Context.
	Context any
}

// QPAttr are the modifiable attributes of a QP (ibv_qp_attr). Which
// fields a Modify applies is given by a QPAttrMask.
type QPAttr struct {
	State            QPState
	CurState         QPState
	PathMTU          MTU
	PathMigState     MigState
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPN          uint32
	AccessFlags      AccessFlags
	Cap              QPCap
	AH               AHAttr
	AltAH            AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
}

// QPAttrMask selects QPAttr fields (ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits, numbered as ibv_qp_attr_mask.
const (
	QPAttrState            QPAttrMask = 1 << 0
	QPAttrCurState         QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	QPAttrAccessFlags      QPAttrMask = 1 << 3
	QPAttrPKeyIndex        QPAttrMask = 1 << 4
	QPAttrPort             QPAttrMask = 1 << 5
	QPAttrQKey             QPAttrMask = 1 << 6
	QPAttrAV               QPAttrMask = 1 << 7
	QPAttrPathMTU          QPAttrMask = 1 << 8
	QPAttrTimeout          QPAttrMask = 1 << 9
	QPAttrRetryCnt         QPAttrMask = 1 << 10
	QPAttrRNRRetry         QPAttrMask = 1 << 11
	QPAttrRQPSN            QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	QPAttrAltPath          QPAttrMask = 1 << 14
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15
	QPAttrSQPSN            QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	QPAttrPathMigState     QPAttrMask = 1 << 18
	QPAttrCap              QPAttrMask = 1 << 19
	QPAttrDestQPN          QPAttrMask = 1 << 20
)

var qpAttrMaskNames = []string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN",
	"MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC",
	"PATH_MIG_STATE", "CAP", "DEST_QPN"}

func (m QPAttrMask) String() string { return flagString(uint64(m), qpAttrMaskNames) }

// CQAttr creates a CQ.
type CQAttr struct {
	// CQE is the minimum number of entries; the provider may round up.
	CQE int
	// Channel, if set, receives an event each time the CQ is armed with
	// ReqNotify and a matching completion arrives.
	Channel *CompChannel
	// Handler, if set, is the CQ's completion handler (ib_ci.h's
	// comp_handler, the event that the kernel CQ API's IB_POLL_SOFTIRQ
	// and IB_POLL_DIRECT styles are built on): it is called each time
	// the CQ is armed with ReqNotify and a matching completion arrives,
	// like a Channel event, but synchronously by the provider goroutine
	// that queued the completion (the device's receive goroutine, a QP
	// engine, or a goroutine posting work), once no provider lock is
	// held. An event-driven application therefore handles a completion
	// with no goroutine hand-off. The handler may Poll, ReqNotify and
	// post work; it must not block (everything else the goroutine would
	// receive waits for it). Calls for one CQ never overlap: an event
	// that arrives while the handler runs makes it run once more when it
	// returns. With both Channel and Handler set, both are notified.
	Handler func(CQ)
	// Context is returned unchanged by CQ.Context.
	Context any
}

// SRQAttr are an SRQ's sizes and limit (ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	// Limit arms the SRQ limit event: when the number of posted receives
	// drops below Limit, an EventSRQLimitReached async event fires once and
	// the limit disarms (set to 0).
	Limit int
}

// SRQAttrMask selects SRQAttr fields for SRQ.Modify.
type SRQAttrMask uint8

// SRQ attribute mask bits.
const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0
	SRQAttrLimit SRQAttrMask = 1 << 1
)

// SRQInitAttr creates an SRQ.
type SRQInitAttr struct {
	Attr    SRQAttr
	Context any
}

// EventType is the type of an asynchronous event (ibv_event_type).
//
// Which providers raise which events (issue #15's audit; softib's rxe
// provokes each one it raises in rxe's TestEventStatusAudit):
//
//	event                softib rxe raises it when               Linux 6.1 rxe
//	CQ_ERR               a CQ overruns                           yes (rxe_cq_post)
//	QP_FATAL             a requester error fails the QP (error   no: rxe_qp_error raises
//	                     NAK, retries exhausted, failed local    nothing; softib follows
//	                     operation, FATAL_ERR), a malformed      IBA's affiliated errors
//	                     receive WQE
//	QP_REQ_ERR           the responder NAKs an invalid request   no (as QP_FATAL)
//	QP_ACCESS_ERR        the responder NAKs a remote access      no (as QP_FATAL)
//	COMM_EST             a QP in RTR receives its first request  no
//	SQ_DRAINED           an SQD QP (EnSQDAsyncNotify) has sent   yes (rxe_comp.c)
//	                     everything
//	PORT_ACTIVE          the device opens                        yes (netdev up)
//	PORT_ERR             its socket fails under it               yes (netdev down)
//	SRQ_LIMIT_REACHED    an armed SRQ drops below its limit      yes (rxe_resp.c)
//	QP_LAST_WQE_REACHED  a QP on an SRQ enters ERR               no (later kernels do)
//	GID_CHANGE           never: a device's GIDs are fixed        via ib_core's GID cache
//	DEVICE_FATAL         never: only its owner closes a device   via uverbs on removal
//	PATH_MIG, PATH_MIG_ERR, SRQ_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE,
//	CLIENT_REREGISTER    never (no path migration; InfiniBand    no
//	                     link layer and hardware events)
//
// The values no softib path raises stay declared because the ibverbs
// provider hands on a kernel device's events by number, and a hardware
// device (or ib_core, for GID_CHANGE and DEVICE_FATAL) raises them.
type EventType uint8

// Asynchronous event types, numbered as ibv_event_type.
const (
	EventCQErr EventType = iota
	EventQPFatal
	EventQPReqErr
	EventQPAccessErr
	EventCommEst
	EventSQDrained
	EventPathMig
	EventPathMigErr
	EventDeviceFatal
	EventPortActive
	EventPortErr
	EventLIDChange
	EventPKeyChange
	EventSMChange
	EventSRQErr
	EventSRQLimitReached
	EventQPLastWQEReached
	EventClientReregister
	EventGIDChange
)

var eventNames = [...]string{"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST",
	"SQ_DRAINED", "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR",
	"LID_CHANGE", "PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED",
	"QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE"}

func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "EventType(?)"
}

// AsyncEvent is an asynchronous event of a device (ibv_async_event). Only
// the object its type concerns is set.
type AsyncEvent struct {
	Type EventType
	QP   QP
	CQ   CQ
	SRQ  SRQ
	Port uint8
	// Time is when the provider raised the event.
	Time time.Time
}
