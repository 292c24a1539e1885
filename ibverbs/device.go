//go:build ibverbs && linux && cgo

package ibverbs

/*
#cgo LDFLAGS: -libverbs
#include "sib.h"
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

// Available reports whether this build includes the provider (build tag
// ibverbs, on Linux with cgo).
const Available = true

// ProviderName is the name the provider registers under.
const ProviderName = "ibverbs"

func init() { verbs.Register(ProviderName, provider{}) }

type provider struct{}

// DeviceInfo describes a kernel RDMA device as ibv_devices lists it.
type DeviceInfo struct {
	Name     string
	NodeGUID uint64
}

// ErrNoDevice reports that no kernel RDMA device matched.
var ErrNoDevice = errors.New("ibverbs: no matching RDMA device")

// Devices lists the kernel's RDMA devices (ibv_get_device_list).
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, listErr(err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	out := make([]DeviceInfo, 0, len(devs))
	for _, d := range devs {
		out = append(out, DeviceInfo{Name: C.GoString(C.ibv_get_device_name(d)), NodeGUID: uint64(C.sib_be64(C.ibv_get_device_guid(d)))})
	}
	return out, nil
}

// DeviceNames lists the kernel's RDMA devices (verbs.Lister).
func (provider) DeviceNames() ([]string, error) {
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	return names, nil
}

// Open opens the device cfg names (cfg.Name), else the device whose GID
// table holds cfg.Addr, else the first device.
func (provider) Open(cfg verbs.DeviceConfig) (verbs.Device, error) {
	if cfg.Port != 0 && cfg.Port != 4791 {
		return nil, fmt.Errorf("%w: a kernel RDMA device uses UDP port 4791 (DeviceConfig.Port %d)", verbs.ErrNotSupported, cfg.Port)
	}
	if cfg.BusyPoll || cfg.NoRxCoalescing || cfg.FixedSourcePort || cfg.NetMTU != 0 || cfg.RxShards != 0 || cfg.ECN {
		return nil, fmt.Errorf("%w: BusyPoll, NoRxCoalescing, RxShards, FixedSourcePort, NetMTU and ECN are Soft-RoCE settings; a kernel device takes them from its driver and netdev", verbs.ErrNotSupported)
	}
	if cfg.Capture != nil {
		return nil, fmt.Errorf("%w: packet capture of a kernel RDMA device (use tcpdump/tshark on its netdev, or rdma-core's ibdump for ConnectX)", verbs.ErrNotSupported)
	}
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, listErr(err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	if len(devs) == 0 {
		return nil, fmt.Errorf("%w: the kernel has no RDMA devices (load a driver, or `rdma link add rxe0 type rxe netdev eth0`)", ErrNoDevice)
	}
	var names []string
	for _, d := range devs {
		name := C.GoString(C.ibv_get_device_name(d))
		names = append(names, name)
		if cfg.Name != "" && name != cfg.Name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, fmt.Errorf("ibverbs: open %s: %w", name, errnoErr(err))
		}
		dev := &device{ctx: ctx, name: name}
		if cfg.Name == "" && cfg.Addr.IsValid() && !dev.hasAddr(cfg.Addr) {
			C.ibv_close_device(ctx)
			continue
		}
		if err := dev.init(); err != nil {
			C.ibv_close_device(ctx)
			return nil, err
		}
		return dev, nil
	}
	switch {
	case cfg.Name != "":
		return nil, fmt.Errorf("%w: no device %q (devices: %v)", ErrNoDevice, cfg.Name, names)
	default:
		return nil, fmt.Errorf("%w: no device has %v in its GID table (devices: %v; name one with -d)", ErrNoDevice, cfg.Addr, names)
	}
}

// device is an open kernel RDMA device.
type device struct {
	ctx  *C.struct_ibv_context
	name string
	attr verbs.DeviceAttr

	comp   *C.struct_ibv_comp_channel
	wakeFd int
	events chan verbs.AsyncEvent
	evDrop uint64
	done   chan struct{}

	// mu guards the object maps, which translate the C objects that
	// events name into Go objects, and closed.
	mu     sync.Mutex
	cqs    map[uintptr]*cq // by the C object's address
	qps    map[uint32]*qp
	srqs   map[uintptr]*srq
	pds    map[*pd]struct{}
	closed bool
}

func (d *device) hasAddr(a netip.Addr) bool {
	want := verbs.GIDFromAddr(a)
	var pa C.struct_ibv_port_attr
	if C.sib_query_port(d.ctx, 1, &pa) != 0 {
		return false
	}
	for i := 0; i < int(pa.gid_tbl_len); i++ {
		var g C.union_ibv_gid
		if C.ibv_query_gid(d.ctx, 1, C.int(i), &g) != 0 {
			continue
		}
		var raw verbs.GID
		C.sib_get_gid(&g, (*C.uint8_t)(unsafe.Pointer(&raw[0])))
		if raw == want {
			return true
		}
	}
	return false
}

func (d *device) init() error {
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(d.ctx, &a); rc != 0 {
		return fmt.Errorf("ibverbs: query %s: %w", d.name, errnoErr(syscall.Errno(rc)))
	}
	d.attr = convDeviceAttr(&a)
	comp, err := C.ibv_create_comp_channel(d.ctx)
	if comp == nil {
		return fmt.Errorf("ibverbs: completion channel of %s: %w", d.name, errnoErr(err))
	}
	d.comp = comp
	for _, fd := range []C.int{comp.fd, d.ctx.async_fd} {
		if rc := C.sib_nonblock(fd); rc != 0 {
			C.ibv_destroy_comp_channel(comp)
			return fmt.Errorf("ibverbs: %w", syscall.Errno(rc))
		}
	}
	wfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		C.ibv_destroy_comp_channel(comp)
		return fmt.Errorf("ibverbs: eventfd: %w", err)
	}
	d.wakeFd = wfd
	d.events = make(chan verbs.AsyncEvent, 256)
	d.done = make(chan struct{})
	d.cqs = map[uintptr]*cq{}
	d.qps = map[uint32]*qp{}
	d.srqs = map[uintptr]*srq{}
	d.pds = map[*pd]struct{}{}
	go d.eventLoop()
	return nil
}

// eventLoop waits on the completion channel and the async event fd, and
// turns what they report into CQ notifications and AsyncEvents.
func (d *device) eventLoop() {
	defer close(d.done)
	fds := []unix.PollFd{
		{Fd: int32(d.comp.fd), Events: unix.POLLIN},
		{Fd: int32(d.ctx.async_fd), Events: unix.POLLIN},
		{Fd: int32(d.wakeFd), Events: unix.POLLIN},
	}
	for {
		_, err := unix.Poll(fds, -1)
		if err != nil && err != unix.EINTR {
			return
		}
		if fds[2].Revents != 0 {
			return
		}
		if fds[0].Revents != 0 {
			for {
				ccq := C.sib_get_cq_event(d.comp)
				if ccq == nil {
					break
				}
				d.mu.Lock()
				c := d.cqs[uintptr(unsafe.Pointer(ccq))]
				d.mu.Unlock()
				if c != nil {
					c.notify()
				}
			}
		}
		if fds[1].Revents != 0 {
			for {
				var ev C.sib_async
				if C.sib_get_async(d.ctx, &ev) != 0 {
					break
				}
				d.asyncEvent(&ev)
			}
		}
	}
}

func (d *device) asyncEvent(ev *C.sib_async) {
	e := verbs.AsyncEvent{Type: verbs.EventType(ev._type), Port: uint8(ev.port), Time: time.Now()}
	d.mu.Lock()
	if q := d.qps[uint32(ev.qp_num)]; q != nil && ev.qp_num != 0 {
		e.QP = q
	}
	if c := d.cqs[uintptr(ev.cq)]; c != nil {
		e.CQ = c
	}
	if s := d.srqs[uintptr(ev.srq)]; s != nil {
		e.SRQ = s
	}
	d.mu.Unlock()
	for {
		select {
		case d.events <- e:
			return
		default:
		}
		// Full: drop the oldest, as the verbs contract says.
		select {
		case <-d.events:
			d.mu.Lock()
			d.evDrop++
			d.mu.Unlock()
		default:
		}
	}
}

func (d *device) Name() string { return d.name }

// KernelDevice names the kernel device: the RDMA CM (package rdmacm) runs
// connections of kernel devices through the kernel's CM (librdmacm).
func (d *device) KernelDevice() string    { return d.name }
func (d *device) Query() verbs.DeviceAttr { return d.attr }

func (d *device) Events() <-chan verbs.AsyncEvent { return d.events }

func (d *device) QueryPort(port uint8) (verbs.PortAttr, error) {
	var a C.struct_ibv_port_attr
	if rc := C.sib_query_port(d.ctx, C.uint8_t(port), &a); rc != 0 {
		return verbs.PortAttr{}, fmt.Errorf("%w: port %d of %s: %v", verbs.ErrInvalidArgument, port, d.name, syscall.Errno(rc))
	}
	return verbs.PortAttr{
		State: verbs.PortState(a.state), MaxMTU: verbs.MTU(a.max_mtu), ActiveMTU: verbs.MTU(a.active_mtu),
		GIDTblLen: int(a.gid_tbl_len), PortCapFlags: uint32(a.port_cap_flags), MaxMsgSize: uint64(a.max_msg_sz),
		BadPKeyCntr: uint32(a.bad_pkey_cntr), QKeyViolCntr: uint32(a.qkey_viol_cntr), PKeyTblLen: uint16(a.pkey_tbl_len),
		LID: uint16(a.lid), SMLID: uint16(a.sm_lid), LMC: uint8(a.lmc), MaxVLNum: uint8(a.max_vl_num), SMSL: uint8(a.sm_sl),
		SubnetTimeout: uint8(a.subnet_timeout), InitTypeReply: uint8(a.init_type_reply), ActiveWidth: uint8(a.active_width),
		ActiveSpeed: uint8(a.active_speed), PhysState: uint8(a.phys_state), LinkLayer: verbs.LinkLayer(a.link_layer),
	}, nil
}

func (d *device) QueryGID(port uint8, index int) (verbs.GID, error) {
	var g C.union_ibv_gid
	if rc, err := C.ibv_query_gid(d.ctx, C.uint8_t(port), C.int(index), &g); rc != 0 {
		return verbs.GID{}, fmt.Errorf("%w: GID %d of port %d: %v", verbs.ErrInvalidArgument, index, port, errnoErr(err))
	}
	var raw verbs.GID
	C.sib_get_gid(&g, (*C.uint8_t)(unsafe.Pointer(&raw[0])))
	return raw, nil
}

func (d *device) GIDTable(port uint8) ([]verbs.GIDEntry, error) {
	pa, err := d.QueryPort(port)
	if err != nil {
		return nil, err
	}
	var out []verbs.GIDEntry
	for i := 0; i < pa.GIDTblLen; i++ {
		var e C.struct_ibv_gid_entry
		if C.sib_query_gid_ex(d.ctx, C.uint32_t(port), C.uint32_t(i), &e) != 0 {
			continue // an empty entry (ENODATA)
		}
		var raw verbs.GID
		C.sib_get_gid(&e.gid, (*C.uint8_t)(unsafe.Pointer(&raw[0])))
		if raw.IsZero() {
			continue
		}
		out = append(out, verbs.GIDEntry{Index: i, GID: raw, Type: verbs.GIDType(e.gid_type)})
	}
	return out, nil
}

func (d *device) QueryPKey(port uint8, index int) (uint16, error) {
	var p C.__be16
	if rc, err := C.ibv_query_pkey(d.ctx, C.uint8_t(port), C.int(index), &p); rc != 0 {
		return 0, fmt.Errorf("%w: P_Key %d of port %d: %v", verbs.ErrInvalidArgument, index, port, errnoErr(err))
	}
	return uint16(p>>8) | uint16(p&0xff)<<8, nil
}

func (d *device) AllocPD() (verbs.PD, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	p, err := C.ibv_alloc_pd(d.ctx)
	if p == nil {
		return nil, fmt.Errorf("ibverbs: alloc PD: %w", createErr(err))
	}
	x := &pd{dev: d, pd: p}
	d.mu.Lock()
	d.pds[x] = struct{}{}
	d.mu.Unlock()
	return x, nil
}

func (d *device) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return verbs.ErrClosed
	}
	return nil
}

// Close destroys what is still open (QPs, SRQs, CQs, MRs, AHs, PDs, in
// that order) and closes the device.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qps := make([]*qp, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	srqs := make([]*srq, 0, len(d.srqs))
	for _, s := range d.srqs {
		srqs = append(srqs, s)
	}
	pds := make([]*pd, 0, len(d.pds))
	for p := range d.pds {
		pds = append(pds, p)
	}
	d.mu.Unlock()
	for _, q := range qps {
		q.destroy()
	}
	for _, s := range srqs {
		s.destroy()
	}
	for _, p := range pds {
		p.destroyChildren()
	}
	d.mu.Lock()
	cqs := make([]*cq, 0, len(d.cqs))
	for _, c := range d.cqs {
		cqs = append(cqs, c)
	}
	d.mu.Unlock()
	for _, c := range cqs {
		c.destroy()
	}
	for _, p := range pds {
		p.destroy()
	}
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(d.wakeFd, one[:])
	<-d.done
	unix.Close(d.wakeFd)
	C.ibv_destroy_comp_channel(d.comp)
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		return fmt.Errorf("ibverbs: close %s: %v", d.name, syscall.Errno(-rc))
	}
	return nil
}

func convDeviceAttr(a *C.struct_ibv_device_attr) verbs.DeviceAttr {
	return verbs.DeviceAttr{
		FWVer: C.GoString(&a.fw_ver[0]), NodeGUID: uint64(C.sib_be64(a.node_guid)), SysImageGUID: uint64(C.sib_be64(a.sys_image_guid)),
		MaxMRSize: uint64(a.max_mr_size), PageSizeCap: uint64(a.page_size_cap), VendorID: uint32(a.vendor_id),
		VendorPartID: uint32(a.vendor_part_id), HWVer: uint32(a.hw_ver), MaxQP: int(a.max_qp), MaxQPWR: int(a.max_qp_wr),
		DeviceCapFlags: uint64(a.device_cap_flags), MaxSGE: int(a.max_sge), MaxSGERd: int(a.max_sge_rd), MaxCQ: int(a.max_cq),
		MaxCQE: int(a.max_cqe), MaxMR: int(a.max_mr), MaxPD: int(a.max_pd), MaxQPRdAtom: int(a.max_qp_rd_atom),
		MaxEERdAtom: int(a.max_ee_rd_atom), MaxResRdAtom: int(a.max_res_rd_atom), MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		MaxEEInitRdAtom: int(a.max_ee_init_rd_atom), AtomicCap: verbs.AtomicCap(a.atomic_cap), MaxEE: int(a.max_ee),
		MaxRDD: int(a.max_rdd), MaxMW: int(a.max_mw), MaxRawIPv6QP: int(a.max_raw_ipv6_qp), MaxRawEthyQP: int(a.max_raw_ethy_qp),
		MaxMcastGrp: int(a.max_mcast_grp), MaxMcastQPAttach: int(a.max_mcast_qp_attach), MaxTotalMcastQPAttach: int(a.max_total_mcast_qp_attach),
		MaxAH: int(a.max_ah), MaxFMR: int(a.max_fmr), MaxMapPerFMR: int(a.max_map_per_fmr), MaxSRQ: int(a.max_srq),
		MaxSRQWR: int(a.max_srq_wr), MaxSRQSGE: int(a.max_srq_sge), MaxPKeys: int(a.max_pkeys),
		LocalCAAckDelay: uint8(a.local_ca_ack_delay), PhysPortCnt: uint8(a.phys_port_cnt),
		MaxMsgSize: 1 << 31,
	}
}

// listErr explains a failed ibv_get_device_list: ENOSYS means the kernel
// offers no RDMA user access at all.
func listErr(err error) error {
	err = errnoErr(err)
	if errors.Is(err, syscall.ENOSYS) {
		return fmt.Errorf("%w: this kernel offers no RDMA devices to user space (no /sys/class/infiniband_verbs: load ib_uverbs and a driver, e.g. modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0) (%v)", ErrNoDevice, err)
	}
	return fmt.Errorf("ibverbs: ibv_get_device_list: %w", err)
}

// errnoErr returns the errno of a failed libibverbs call (cgo's second
// result), or EIO when the library left none.
func errnoErr(err error) error {
	if err == nil {
		return syscall.EIO
	}
	return err
}

// createErr maps the errno of a failed create/alloc call to the verbs
// sentinels, keeping the errno in the chain.
func createErr(err error) error {
	err = errnoErr(err)
	switch {
	case errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w (%v)", verbs.ErrResourceLimit, err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("%w (%v)", verbs.ErrInvalidArgument, err)
	case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS):
		return fmt.Errorf("%w (%v)", verbs.ErrNotSupported, err)
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("%w (%v)", verbs.ErrBusy, err)
	}
	return err
}

// rcErr maps the return code of a libibverbs call that returns an errno
// value (post, modify, destroy).
func rcErr(rc C.int, what string) error {
	if rc == 0 {
		return nil
	}
	e := syscall.Errno(rc)
	if rc < 0 {
		e = syscall.Errno(-rc)
	}
	switch e {
	case syscall.ENOMEM:
		return fmt.Errorf("%s: %w (%v)", what, verbs.ErrQueueFull, e)
	case syscall.EINVAL:
		return fmt.Errorf("%s: %w (%v)", what, verbs.ErrInvalidArgument, e)
	case syscall.EBUSY:
		return fmt.Errorf("%s: %w (%v)", what, verbs.ErrBusy, e)
	case syscall.EOPNOTSUPP, syscall.ENOSYS:
		return fmt.Errorf("%s: %w (%v)", what, verbs.ErrNotSupported, e)
	}
	return fmt.Errorf("%s: %w", what, e)
}
