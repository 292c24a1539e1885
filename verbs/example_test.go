package verbs_test

import (
	"fmt"

	"softib/internal/testaddr"
	"softib/verbs"

	_ "softib/rxe" // registers the "rxe" provider
)

// Example opens a device through the provider-neutral verbs API
// (ibv_open_device + ibv_query_*), checks its port and GID table, and
// sets up what every RC program starts with: a PD, a CQ with a
// completion channel, a QP and a registered buffer.
func Example() {
	addr := testaddr.Next() // a loopback address of this test process
	dev, err := verbs.Open(verbs.DeviceConfig{Provider: "rxe", Addr: addr})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	port, _ := dev.QueryPort(1)
	gid, _ := dev.QueryGID(1, 1)
	fmt.Println(port.State, port.ActiveMTU, port.LinkLayer, gid == verbs.GIDFromAddr(addr))

	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(verbs.CQAttr{CQE: 16, Channel: verbs.NewCompChannel(1)})
	attr := &verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qp, err := pd.CreateQP(attr)
	if err != nil {
		panic(err)
	}
	// An MR that a peer may RDMA WRITE into needs AccessRemoteWrite, and
	// so does the QP (QPAttr.AccessFlags on the way to INIT).
	mr, _ := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	fmt.Println(qp.State(), err, attr.Cap.MaxInlineData, mr.Len())
	// Output:
	// PORT_ACTIVE 4096 Ethernet true
	// INIT <nil> 16 4096
}
