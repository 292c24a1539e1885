// Package verbs is softib's RDMA verbs API: devices, protection domains,
// memory regions, completion queues, queue pairs (RC, UC, UD), shared
// receive queues and address handles, in the shape of rdma-core's
// libibverbs and the Linux kernel verbs, behind a provider interface in the
// spirit of ib_ci.h.
//
// The public objects are interfaces (Device, PD, MR, CQ, QP, SRQ, AH)
// implemented by a provider. A provider registers itself with Register from
// an init function, like a database/sql driver, and users open devices with
// Open:
//
//	import _ "softib/rxe" // the Soft-RoCE provider
//
//	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr("127.0.0.2")})
//	pd, _ := dev.AllocPD()
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	cq, _ := dev.CreateCQ(verbs.CQAttr{CQE: 256})
//	qp, _ := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
//		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	// RESET→INIT→RTR→RTS with Modify, then PostSend/PostRecv and Poll.
//
// Memory is ordinary Go memory: RegMR pins nothing but keeps a reference to
// the slice; the provider reads and writes it from its own goroutines, so an
// application must not touch a buffer between posting a work request on it
// and polling its completion, exactly as with hardware. An MR's Addr is the
// virtual address of the slice's first byte (what rdma-core applications
// exchange with their peers), and SGE and RETH addresses are virtual
// addresses inside a registered range.
//
// This package also holds what is generic across providers: the IBA QP
// state-transition rules (ModifyCheck), GID helpers, completion channels and
// the kernel CQ API's polling styles (PollBudget, CQWorker).
package verbs
