//go:build ibverbs && linux && cgo

package rdmacm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>

typedef struct {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int event;
	int status;
	uint8_t pd[256];
	uint8_t pd_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint32_t qp_num;
} sib_cm_event;

// sib_get_event takes the next event off the (non-blocking) channel,
// copies what Go needs and acks it; it returns an errno (EAGAIN: none).
static int sib_get_event(struct rdma_event_channel *ch, sib_cm_event *out) {
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) return errno;
	memset(out, 0, sizeof(*out));
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->event = ev->event;
	out->status = ev->status;
	if (ev->id && ev->id->ps != RDMA_PS_UDP && ev->id->ps != RDMA_PS_IPOIB) {
		struct rdma_conn_param *c = &ev->param.conn;
		if (c->private_data && c->private_data_len) {
			memcpy(out->pd, c->private_data, c->private_data_len);
			out->pd_len = c->private_data_len;
		}
		out->responder_resources = c->responder_resources;
		out->initiator_depth = c->initiator_depth;
		out->flow_control = c->flow_control;
		out->retry_count = c->retry_count;
		out->rnr_retry_count = c->rnr_retry_count;
		out->srq = c->srq;
		out->qp_num = c->qp_num;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static int sib_nonblock_fd(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return errno;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? errno : 0;
}

// Addresses cross as 16-byte IPv6 (IPv4-mapped for IPv4) plus a port;
// family 4 or 6 says which sockaddr to build.
static void sib_sockaddr(struct sockaddr_storage *ss, int family, const uint8_t *ip, uint16_t port) {
	memset(ss, 0, sizeof(*ss));
	if (family == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, ip + 12, 4);
		s->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, ip, 16);
		s->sin6_port = htons(port);
	}
}

static int sib_bind(struct rdma_cm_id *id, int family, const uint8_t *ip, uint16_t port) {
	struct sockaddr_storage ss;
	sib_sockaddr(&ss, family, ip, port);
	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? errno : 0;
}

static int sib_resolve_addr(struct rdma_cm_id *id, int sfam, const uint8_t *sip, uint16_t sport,
		int dfam, const uint8_t *dip, uint16_t dport, int ms) {
	struct sockaddr_storage src, dst;
	sib_sockaddr(&dst, dfam, dip, dport);
	if (sfam) sib_sockaddr(&src, sfam, sip, sport);
	return rdma_resolve_addr(id, sfam ? (struct sockaddr *)&src : NULL, (struct sockaddr *)&dst, ms) ? errno : 0;
}

// sib_addr reads a bound or peer address: family (0 none, 4, 6), 16-byte
// IP (IPv4-mapped), port.
static int sib_addr(struct sockaddr *sa, uint8_t *ip, uint16_t *port) {
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memset(ip, 0, 10); ip[10] = 0xff; ip[11] = 0xff;
		memcpy(ip + 12, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 6;
	}
	return 0;
}

static int sib_local(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port) { return sib_addr(rdma_get_local_addr(id), ip, port); }
static int sib_peer(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port) { return sib_addr(rdma_get_peer_addr(id), ip, port); }

static const char *sib_dev_name(struct rdma_cm_id *id) {
	return id->verbs ? ibv_get_device_name(id->verbs->device) : "";
}

static int sib_conn(struct rdma_cm_id *id, int accept, const uint8_t *pd, uint8_t pd_len,
		uint8_t rr, uint8_t id_, uint8_t fc, uint8_t rc, uint8_t rnr, uint8_t srq, uint32_t qpn) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof(p));
	p.private_data = pd_len ? pd : NULL;
	p.private_data_len = pd_len;
	p.responder_resources = rr;
	p.initiator_depth = id_;
	p.flow_control = fc;
	p.retry_count = rc;
	p.rnr_retry_count = rnr;
	p.srq = srq;
	p.qp_num = qpn;
	return (accept ? rdma_accept(id, &p) : rdma_connect(id, &p)) ? errno : 0;
}

static int sib_set_tos(struct rdma_cm_id *id, uint8_t tos) {
	return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) ? errno : 0;
}

static int sib_call(int rc) { return rc ? errno : 0; }

typedef struct {
	int state, mtu, qkey_unused;
	uint32_t rq_psn, sq_psn, dest_qp_num, access;
	uint16_t pkey_index;
	uint8_t max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry;
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class, sl, is_global;
	uint16_t dlid;
	int mask;
} sib_qp_attr;

static int sib_init_qp_attr(struct rdma_cm_id *id, int state, sib_qp_attr *o) {
	struct ibv_qp_attr a;
	int mask = 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	if (rdma_init_qp_attr(id, &a, &mask)) return errno;
	memset(o, 0, sizeof(*o));
	o->state = a.qp_state; o->mtu = a.path_mtu;
	o->rq_psn = a.rq_psn; o->sq_psn = a.sq_psn; o->dest_qp_num = a.dest_qp_num; o->access = a.qp_access_flags;
	o->pkey_index = a.pkey_index; o->max_rd_atomic = a.max_rd_atomic; o->max_dest_rd_atomic = a.max_dest_rd_atomic;
	o->min_rnr_timer = a.min_rnr_timer; o->port_num = a.port_num; o->timeout = a.timeout;
	o->retry_cnt = a.retry_cnt; o->rnr_retry = a.rnr_retry;
	memcpy(o->dgid, a.ah_attr.grh.dgid.raw, 16);
	o->flow_label = a.ah_attr.grh.flow_label; o->sgid_index = a.ah_attr.grh.sgid_index;
	o->hop_limit = a.ah_attr.grh.hop_limit; o->traffic_class = a.ah_attr.grh.traffic_class;
	o->sl = a.ah_attr.sl; o->is_global = a.ah_attr.is_global; o->dlid = a.ah_attr.dlid;
	o->mask = mask;
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"softib/verbs"
)

func init() { kernelBackend = newKernelCM }

// kcm is a Manager's librdmacm event channel and the IDs on it.
type kcm struct {
	m      *Manager
	ch     *C.struct_rdma_event_channel
	wakeFd int
	done   chan struct{}

	mu  sync.Mutex // guards ids
	ids map[uintptr]*kid
}

type kid struct {
	c  *kcm
	id *C.struct_rdma_cm_id
	g  *ID
}

func newKernelCM(m *Manager) (kernelCM, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("rdmacm: rdma_create_event_channel: %w (is rdma_ucm loaded?)", errOr(err))
	}
	if rc := C.sib_nonblock_fd(ch.fd); rc != 0 {
		C.rdma_destroy_event_channel(ch)
		return nil, syscall.Errno(rc)
	}
	w, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	k := &kcm{m: m, ch: ch, wakeFd: w, done: make(chan struct{}), ids: map[uintptr]*kid{}}
	go k.loop()
	return k, nil
}

func errOr(err error) error {
	if err == nil {
		return syscall.EIO
	}
	return err
}

func (k *kcm) newID(id *ID, ps PortSpace, t verbs.QPType) (kernelID, error) {
	if t == verbs.QPTypeUD || ps == PSUDP || ps == PSIPoIB {
		return nil, fmt.Errorf("rdmacm: UD IDs on a kernel device: %w", verbs.ErrNotSupported)
	}
	cps := C.enum_rdma_port_space(C.RDMA_PS_TCP)
	if ps == PSIB {
		cps = C.RDMA_PS_IB
	}
	var cid *C.struct_rdma_cm_id
	rc, err := C.rdma_create_id(k.ch, &cid, nil, cps)
	if rc != 0 {
		return nil, fmt.Errorf("rdmacm: rdma_create_id: %w", errOr(err))
	}
	x := &kid{c: k, id: cid, g: id}
	k.mu.Lock()
	k.ids[uintptr(unsafe.Pointer(cid))] = x
	k.mu.Unlock()
	return x, nil
}

func (k *kcm) loop() {
	defer close(k.done)
	fds := []unix.PollFd{{Fd: int32(k.ch.fd), Events: unix.POLLIN}, {Fd: int32(k.wakeFd), Events: unix.POLLIN}}
	var ev C.sib_cm_event
	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		for C.sib_get_event(k.ch, &ev) == 0 {
			k.dispatch(&ev)
		}
	}
}

func (k *kcm) dispatch(ev *C.sib_cm_event) {
	e := &Event{Type: EventType(ev.event), Status: int(ev.status)}
	if e.Status != 0 {
		e.Err = fmt.Errorf("rdmacm: kernel CM: %v status %d", e.Type, e.Status)
		if e.Status < 0 {
			e.Err = fmt.Errorf("rdmacm: kernel CM: %v: %w", e.Type, syscall.Errno(-e.Status))
		}
	}
	e.Conn = ConnParam{
		ResponderResources: uint8(ev.responder_resources), InitiatorDepth: uint8(ev.initiator_depth),
		FlowControl: ev.flow_control != 0, RetryCount: uint8(ev.retry_count), RNRRetryCount: uint8(ev.rnr_retry_count),
		SRQ: ev.srq != 0, QPNum: uint32(ev.qp_num),
	}
	if n := int(ev.pd_len); n > 0 {
		e.Conn.PrivateData = C.GoBytes(unsafe.Pointer(&ev.pd[0]), C.int(n))
	}
	k.mu.Lock()
	x := k.ids[uintptr(unsafe.Pointer(ev.id))]
	l := k.ids[uintptr(unsafe.Pointer(ev.listen_id))]
	k.mu.Unlock()
	if e.Type == EventConnectRequest {
		if l == nil {
			C.rdma_reject(ev.id, nil, 0)
			return
		}
		k.request(l, ev.id, e)
		return
	}
	if x == nil {
		return
	}
	x.g.kernelEvent(e)
}

// request makes the Go ID of a new connection request and delivers the
// CONNECT_REQUEST on the listener's channel.
func (k *kcm) request(l *kid, cid *C.struct_rdma_cm_id, e *Event) {
	lg := l.g
	lg.mu.Lock()
	child := &ID{m: lg.m, ch: lg.ch, ps: lg.ps, qpType: lg.qpType, ctx: lg.ctx, state: StateConnect, parent: lg}
	lg.mu.Unlock()
	x := &kid{c: k, id: cid, g: child}
	child.k = x
	k.mu.Lock()
	k.ids[uintptr(unsafe.Pointer(cid))] = x
	k.mu.Unlock()
	lg.m.mu.Lock()
	lg.m.ids[child] = struct{}{}
	lg.m.mu.Unlock()
	child.mu.Lock()
	child.kernelRefreshLocked()
	child.req = e.Conn
	child.mu.Unlock()
	e.ID, e.ListenID = child, lg
	child.emit(e)
}

func (k *kcm) close() {
	k.mu.Lock()
	ids := make([]*kid, 0, len(k.ids))
	for _, x := range k.ids {
		ids = append(ids, x)
	}
	k.mu.Unlock()
	for _, x := range ids {
		_ = x.destroy()
	}
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(k.wakeFd, one[:])
	<-k.done
	unix.Close(k.wakeFd)
	C.rdma_destroy_event_channel(k.ch)
}

func cAddr(a netip.AddrPort) (C.int, [16]byte) {
	ip := a.Addr()
	if !ip.IsValid() {
		return 0, [16]byte{}
	}
	fam := C.int(6)
	if ip.Unmap().Is4() {
		fam = 4
	}
	return fam, ip.As16()
}

func goAddr(fam C.int, ip [16]byte, port C.uint16_t) netip.AddrPort {
	if fam == 0 {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), uint16(port))
}

func cmErr(what string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	e := syscall.Errno(rc)
	switch e {
	case syscall.EADDRINUSE:
		return fmt.Errorf("rdmacm: %s: %w (%v)", what, ErrAddrInUse, e)
	case syscall.EADDRNOTAVAIL, syscall.ENODEV:
		return fmt.Errorf("rdmacm: %s: %w (%v)", what, ErrNoDevice, e)
	case syscall.EINVAL:
		return fmt.Errorf("rdmacm: %s: %w (%v)", what, ErrState, e)
	}
	return fmt.Errorf("rdmacm: %s: %w", what, e)
}

func (x *kid) bind(a netip.AddrPort) error {
	fam, ip := cAddr(a)
	if fam == 0 {
		fam, ip = 4, netip.IPv4Unspecified().As16()
	}
	return cmErr("bind", C.sib_bind(x.id, fam, (*C.uint8_t)(unsafe.Pointer(&ip[0])), C.uint16_t(a.Port())))
}

func (x *kid) resolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	sf, sip := cAddr(src)
	if src.Addr().IsValid() && src.Addr().IsUnspecified() {
		sf = 0
	}
	df, dip := cAddr(dst)
	if df == 0 {
		return fmt.Errorf("rdmacm: destination %v: %w", dst, ErrInvalid)
	}
	return cmErr("resolve address", C.sib_resolve_addr(x.id, sf, (*C.uint8_t)(unsafe.Pointer(&sip[0])), C.uint16_t(src.Port()),
		df, (*C.uint8_t)(unsafe.Pointer(&dip[0])), C.uint16_t(dst.Port()), C.int(timeout.Milliseconds())))
}

func (x *kid) resolveRoute(timeout time.Duration) error {
	return cmErr("resolve route", C.sib_call(C.rdma_resolve_route(x.id, C.int(timeout.Milliseconds()))))
}

func (x *kid) listen(backlog int) error {
	return cmErr("listen", C.sib_call(C.rdma_listen(x.id, C.int(backlog))))
}

func (x *kid) conn(accept bool, p *ConnParam) error {
	if len(p.PrivateData) > 255 {
		return &PrivateDataError{Op: map[bool]string{false: "connect", true: "accept"}[accept], Len: len(p.PrivateData), Max: 255}
	}
	pd := (*C.uint8_t)(C.calloc(256, 1))
	defer C.free(unsafe.Pointer(pd))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(pd)), 256), p.PrivateData)
	b := func(v bool) C.uint8_t {
		if v {
			return 1
		}
		return 0
	}
	acc := C.int(0)
	if accept {
		acc = 1
	}
	what := "connect"
	if accept {
		what = "accept"
	}
	return cmErr(what, C.sib_conn(x.id, acc, pd, C.uint8_t(len(p.PrivateData)), C.uint8_t(p.ResponderResources),
		C.uint8_t(p.InitiatorDepth), b(p.FlowControl), C.uint8_t(min(p.RetryCount, 7)), C.uint8_t(min(p.RNRRetryCount, 7)),
		b(p.SRQ), C.uint32_t(p.QPNum)))
}

func (x *kid) connect(p *ConnParam) error { return x.conn(false, p) }
func (x *kid) accept(p *ConnParam) error  { return x.conn(true, p) }

func (x *kid) reject(privateData []byte) error {
	if len(privateData) > 148 {
		return &PrivateDataError{Op: "reject", Len: len(privateData), Max: 148}
	}
	pd := (*C.uint8_t)(C.calloc(256, 1))
	defer C.free(unsafe.Pointer(pd))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(pd)), 256), privateData)
	return cmErr("reject", C.sib_call(C.rdma_reject(x.id, unsafe.Pointer(pd), C.uint8_t(len(privateData)))))
}

func (x *kid) establish() error  { return cmErr("establish", C.sib_call(C.rdma_establish(x.id))) }
func (x *kid) disconnect() error { return cmErr("disconnect", C.sib_call(C.rdma_disconnect(x.id))) }
func (x *kid) setTOS(tos uint8) error {
	if tos == 0 {
		return nil
	}
	return cmErr("set TOS", C.sib_set_tos(x.id, C.uint8_t(tos)))
}

func (x *kid) initQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	var o C.sib_qp_attr
	if rc := C.sib_init_qp_attr(x.id, C.int(state), &o); rc != 0 {
		return verbs.QPAttr{}, 0, cmErr("init QP attributes for "+state.String(), rc)
	}
	a := verbs.QPAttr{
		State: verbs.QPState(o.state), PathMTU: verbs.MTU(o.mtu), RQPSN: uint32(o.rq_psn), SQPSN: uint32(o.sq_psn),
		DestQPN: uint32(o.dest_qp_num), AccessFlags: verbs.AccessFlags(o.access), PKeyIndex: uint16(o.pkey_index),
		MaxRdAtomic: uint8(o.max_rd_atomic), MaxDestRdAtomic: uint8(o.max_dest_rd_atomic), MinRNRTimer: uint8(o.min_rnr_timer),
		PortNum: uint8(o.port_num), Timeout: uint8(o.timeout), RetryCnt: uint8(o.retry_cnt), RNRRetry: uint8(o.rnr_retry),
	}
	a.AH = verbs.AHAttr{IsGlobal: o.is_global != 0, DLID: uint16(o.dlid), SL: uint8(o.sl), PortNum: uint8(o.port_num),
		GRH: verbs.GlobalRoute{FlowLabel: uint32(o.flow_label), SGIDIndex: uint8(o.sgid_index), HopLimit: uint8(o.hop_limit), TrafficClass: uint8(o.traffic_class)}}
	copy(a.AH.GRH.DGID[:], C.GoBytes(unsafe.Pointer(&o.dgid[0]), 16))
	return a, verbs.QPAttrMask(o.mask), nil
}

func (x *kid) addrs() (local, remote netip.AddrPort) {
	var ip [16]byte
	var port C.uint16_t
	fam := C.sib_local(x.id, (*C.uint8_t)(unsafe.Pointer(&ip[0])), &port)
	local = goAddr(fam, ip, port)
	fam = C.sib_peer(x.id, (*C.uint8_t)(unsafe.Pointer(&ip[0])), &port)
	remote = goAddr(fam, ip, port)
	return local, remote
}

func (x *kid) deviceName() string { return C.GoString(C.sib_dev_name(x.id)) }

func (x *kid) destroy() error {
	k := x.c
	k.mu.Lock()
	_, live := k.ids[uintptr(unsafe.Pointer(x.id))]
	delete(k.ids, uintptr(unsafe.Pointer(x.id)))
	k.mu.Unlock()
	if !live {
		return nil
	}
	rc := C.sib_call(C.rdma_destroy_id(x.id))
	if rc != 0 && !errors.Is(syscall.Errno(rc), syscall.EINVAL) {
		return cmErr("destroy", rc)
	}
	return nil
}
