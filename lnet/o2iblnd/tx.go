package o2iblnd

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"softib/lnet/lnd"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// Work request IDs carry the kind of work in the top bits and an index
// (tx pool index, or rx index within the connection) below.
const (
	wridTx   uint64 = 1 << 62 // the message SEND of a tx (signaled)
	wridRDMA uint64 = 2 << 62 // an RDMA WRITE of a tx (unsignaled)
	wridRx   uint64 = 3 << 62 // a receive
	wridMask uint64 = 3 << 62
)

// tx is a transmit descriptor (kib_tx): a pre-registered 4 KiB message
// buffer, the work requests of its RDMA, and the LNet messages it
// finalizes. Descriptors come from the NI's pool of NTx; fields are
// guarded by the owning connection's mutex once queued.
type tx struct {
	idx    int
	buf    []byte    // KibMsgSize bytes inside the pool MR
	sge    verbs.SGE // the whole buffer; Length set per message
	typ    lnetwire.KibMsgType
	nob    int
	cookie uint64

	conn     *conn
	lntmsg   [2]*lnd.Msg // the message, and a GET's REPLY
	status   error
	sending  int  // signaled sends posted, not completed
	waiting  bool // waiting for the peer (PUT_ACK/PUT_NAK, PUT_DONE, GET_DONE)
	queued   bool // on the flow's queues
	active   bool // in conn.active
	deadline time.Time

	wrs   []verbs.SendWR // RDMA WRITEs then the message SEND
	sges  []verbs.SGE    // source pieces
	wsges []verbs.SGE    // the RDMA WRITEs' gather lists, one after the other
	// wsgeEnd[i] is where WRITE i's SGEs end in wsges (while building:
	// the last one's end so far).
	wsgeEnd []int
	msgSGL  [1]verbs.SGE // the message SEND's SGL
	frags   []lnetwire.KibRDMAFrag
	mrs     []*mrEntry // registrations held for this tx
	// bounce is a registered staging buffer for a sink spanning several
	// fragments (one rkey must cover the whole descriptor); sink is where
	// its bytes go when the RDMA is done.
	bounce *bounceBuf
	sink   lnd.IOV
	// fmr is the fast-registration MR of a multi-fragment sink whose
	// pages map onto one (the REG_MR work request is in wrs, ahead of
	// the message that carries its key); fsges is its scatter list.
	fmr   verbs.FastRegMR
	fsges []verbs.SGE
	// rdBuf holds a peer's descriptor copied out of a receive buffer.
	rdKey   uint32
	rdFrags []lnetwire.KibRDMAFrag
}

// txPool is the NI's set of tx descriptors, with one MR over all their
// message buffers (Lustre's pre-mapped tx pages).
type txPool struct {
	mu   sync.Mutex
	free []*tx
	all  []*tx
	mr   verbs.MR
	next uint64 // cookies
}

func newTxPool(pd verbs.PD, n int) (*txPool, error) {
	mem := make([]byte, n*lnetwire.KibMsgSize)
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("o2iblnd: register tx buffers: %w", err)
	}
	p := &txPool{mr: mr, all: make([]*tx, n), free: make([]*tx, 0, n), next: 1}
	for i := range n {
		t := &tx{idx: i, buf: mem[i*lnetwire.KibMsgSize : (i+1)*lnetwire.KibMsgSize : (i+1)*lnetwire.KibMsgSize]}
		t.sge = mr.SGE(i*lnetwire.KibMsgSize, lnetwire.KibMsgSize)
		p.all[i] = t
		p.free = append(p.free, t)
	}
	return p, nil
}

// get returns an idle descriptor with a fresh cookie, or nil.
func (p *txPool) get() *tx {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	t := p.free[n-1]
	p.free = p.free[:n-1]
	t.cookie = p.next
	p.next++
	return t
}

// put recycles t; the caller has released its registrations.
func (p *txPool) put(t *tx) {
	t.typ, t.nob, t.cookie, t.conn, t.status = 0, 0, 0, nil, nil
	t.lntmsg = [2]*lnd.Msg{}
	t.sending, t.waiting, t.queued, t.active = 0, false, false, false
	t.deadline = time.Time{}
	clear(t.wrs)
	t.wrs = t.wrs[:0]
	t.sges = t.sges[:0]
	t.wsges = t.wsges[:0]
	t.wsgeEnd = t.wsgeEnd[:0]
	t.frags = t.frags[:0]
	t.rdFrags = t.rdFrags[:0]
	t.sink = lnd.IOV{}
	p.mu.Lock()
	p.free = append(p.free, t)
	p.mu.Unlock()
}

func (p *txPool) idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// mrKey names a registered LNet fragment: its first byte and length.
// While an entry is cached its MR keeps the memory alive, so the address
// cannot be reused by another allocation.
type mrKey struct {
	p unsafe.Pointer
	n int
}

type mrEntry struct {
	key mrKey
	mr  verbs.MR
	// refs counts the txs using the entry. It rises under mrCache.mu
	// (get) and falls without it (put, on every tx completion, from
	// every connection's completion goroutine): an entry seen idle under
	// the lock cannot be taken before the lock is released, and one
	// released just after the check is merely evicted later.
	refs atomic.Int32
	tick uint64
	// uncached entries (noCache) are in no map: the last put
	// deregisters them.
	uncached bool
}

// mrCache keeps LNet buffers registered across messages (Lustre's FMR
// pool cache, fmr_cache=1): MDs are usually reused, so registration cost
// is paid once per buffer. Entries in use by a tx are never evicted; the
// least recently used idle entry goes when the cache is full.
//
// Every cached MR allows remote write: while cached, a peer holding an
// old descriptor could still write into the buffer, the same exposure as
// Lustre's cached FMR mappings.
//
// The cache also bounds the bytes it keeps alive (maxBytes): a cached
// MR holds its buffer, so buffers the application dropped are released
// only when evicted.
//
// flushTrigger (fmr_flush_trigger) bounds the idle entries: a miss that
// finds that many deregisters the least recently used first. noCache
// (fmr_cache=0) caches nothing: every get registers, and the last put
// deregisters.
type mrCache struct {
	pd           verbs.PD
	max          int
	maxBytes     int
	flushTrigger int // 0: no bound but max
	noCache      bool
	mu           sync.Mutex
	m            map[mrKey]*mrEntry
	bytes        int
	tick         uint64
}

func newMRCache(pd verbs.PD, max, maxBytes int) *mrCache {
	return &mrCache{pd: pd, max: max, maxBytes: maxBytes, m: make(map[mrKey]*mrEntry)}
}

// get returns a referenced registration of frag.
func (c *mrCache) get(frag []byte) (*mrEntry, error) {
	k := mrKey{unsafe.Pointer(unsafe.SliceData(frag)), len(frag)}
	if c.noCache {
		mr, err := c.pd.RegMR(frag, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			return nil, err
		}
		e := &mrEntry{key: k, mr: mr, uncached: true}
		e.refs.Store(1)
		return e, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if e := c.m[k]; e != nil {
		e.refs.Add(1)
		e.tick = c.tick
		return e, nil
	}
	for len(c.m) >= c.max || (len(c.m) > 0 && c.bytes+len(frag) > c.maxBytes) {
		if !c.evictLocked() {
			break // everything is in use: grow past the bounds
		}
	}
	c.trimIdleLocked()
	mr, err := c.pd.RegMR(frag, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	e := &mrEntry{key: k, mr: mr, tick: c.tick}
	e.refs.Store(1)
	c.m[k] = e
	c.bytes += len(frag)
	return e, nil
}

// evictLocked deregisters the least recently used idle entry; false if
// every entry is in use.
func (c *mrCache) evictLocked() bool {
	var old *mrEntry
	for _, e := range c.m {
		if e.refs.Load() == 0 && (old == nil || e.tick < old.tick) {
			old = e
		}
	}
	if old == nil {
		return false
	}
	delete(c.m, old.key)
	c.bytes -= old.key.n
	old.mr.Dereg()
	return true
}

// trimIdleLocked makes room for a new entry under flushTrigger: once the
// idle entries reach it, the least recently used go until one fewer
// remain, so that at most flushTrigger are idle when the new one is
// released too.
func (c *mrCache) trimIdleLocked() {
	if c.flushTrigger <= 0 || len(c.m) < c.flushTrigger {
		return
	}
	var idle []*mrEntry
	for _, e := range c.m {
		if e.refs.Load() == 0 {
			idle = append(idle, e)
		}
	}
	if len(idle) < c.flushTrigger {
		return
	}
	slices.SortFunc(idle, func(a, b *mrEntry) int { return cmp.Compare(a.tick, b.tick) })
	for _, e := range idle[:len(idle)-c.flushTrigger+1] {
		delete(c.m, e.key)
		c.bytes -= e.key.n
		e.mr.Dereg()
	}
}

// stats returns the cached registrations and the bytes they pin.
func (c *mrCache) stats() (n, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}

func (c *mrCache) put(e *mrEntry) {
	if e.refs.Add(-1) == 0 && e.uncached {
		e.mr.Dereg()
	}
}

func (c *mrCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		e.mr.Dereg()
		delete(c.m, k)
	}
}

// bounceBuf is a registered LNET_MTU staging buffer.
type bounceBuf struct {
	buf []byte
	mr  verbs.MR
}

// bouncePool hands out staging buffers for sinks spanning several MD
// fragments, created on demand and kept up to maxIdle.
type bouncePool struct {
	pd      verbs.PD
	mu      sync.Mutex
	free    []*bounceBuf
	all     []*bounceBuf
	maxIdle int
}

func (p *bouncePool) get() (*bounceBuf, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b, nil
	}
	buf := make([]byte, lnd.MaxPayload)
	mr, err := p.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	b := &bounceBuf{buf: buf, mr: mr}
	p.all = append(p.all, b)
	return b, nil
}

func (p *bouncePool) put(b *bounceBuf) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < p.maxIdle {
		p.free = append(p.free, b)
		return
	}
	for i, x := range p.all {
		if x == b {
			p.all = append(p.all[:i], p.all[i+1:]...)
			break
		}
	}
	b.mr.Dereg()
}

func (p *bouncePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.all {
		b.mr.Dereg()
	}
	p.all, p.free = nil, nil
}

// wsgeStart returns where the RDMA WRITE being built starts in t.wsges.
func (t *tx) wsgeStart() int {
	if n := len(t.wsgeEnd); n > 1 {
		return t.wsgeEnd[n-2]
	}
	return 0
}

// walkFrags calls fn with each (fragment, offset, length) piece of v.
func walkFrags(v lnd.IOV, fn func(f []byte, off, n int) bool) {
	skip, left := v.Offset, v.Len
	for _, f := range v.Frags {
		if left <= 0 {
			return
		}
		if skip >= len(f) {
			skip -= len(f)
			continue
		}
		n := min(len(f)-skip, left)
		if !fn(f, skip, n) {
			return
		}
		left -= n
		skip = 0
	}
}

// mapSink registers v as an RDMA sink and fills t.frags/the returned key
// with its descriptor: one fragment when v lies in one MD fragment; a
// fast-registration MR over the fragments when they map onto pages
// (Lustre's FastReg pool: the peer's RDMA lands in place); otherwise a
// bounce buffer whose bytes are copied into v once the data has landed
// (t.sink).
func (d *Driver) mapSink(t *tx, v lnd.IOV) (uint32, error) {
	t.frags = t.frags[:0]
	pieces := 0
	var frag []byte
	var off int
	walkFrags(v, func(f []byte, o, n int) bool {
		pieces++
		frag, off = f, o
		return pieces < 2
	})
	if pieces == 1 {
		e, err := d.mrs.get(frag)
		if err != nil {
			return 0, err
		}
		t.mrs = append(t.mrs, e)
		t.frags = append(t.frags, lnetwire.KibRDMAFrag{Nob: uint32(v.Len), Addr: e.mr.Addr() + uint64(off)})
		return e.mr.RKey(), nil
	}
	if key, ok := d.mapFastReg(t, v); ok {
		t.frags = append(t.frags, lnetwire.KibRDMAFrag{Nob: uint32(v.Len), Addr: t.fmr.IOVA()})
		return key, nil
	}
	b, err := d.bounce.get()
	if err != nil {
		return 0, err
	}
	t.bounce, t.sink = b, v
	t.frags = append(t.frags, lnetwire.KibRDMAFrag{Nob: uint32(v.Len), Addr: b.mr.Addr()})
	return b.mr.RKey(), nil
}

// fastRegPages is the page-list size of a sink's fast-reg MR: an LNet
// payload (LNET_MTU, 1 MiB) in 4 KiB pages, plus one for a first
// fragment that starts inside a page.
const fastRegPages = lnd.MaxPayload/4096 + 1

// mapFastReg registers the fragments of v through one fast-registration
// MR and queues its REG_MR ahead of t's message (kiblnd_fmr_pool_map with
// FastReg). It reports false, registering nothing, when the provider has
// no fast registration or the fragments leave gaps inside pages.
func (d *Driver) mapFastReg(t *tx, v lnd.IOV) (uint32, bool) {
	if d.noFastReg.Load() {
		return 0, false
	}
	t.fsges = t.fsges[:0]
	ok := true
	walkFrags(v, func(f []byte, o, n int) bool {
		e, err := d.mrs.get(f)
		if err != nil {
			ok = false
			return false
		}
		t.mrs = append(t.mrs, e)
		t.fsges = append(t.fsges, verbs.SGE{Addr: e.mr.Addr() + uint64(o), Length: uint32(n), LKey: e.mr.LKey()})
		return true
	})
	if !ok {
		return 0, false
	}
	fmr, err := verbs.AllocMR(d.pd, verbs.MRTypeMemReg, fastRegPages)
	if err != nil {
		if errors.Is(err, verbs.ErrNotSupported) {
			d.noFastReg.Store(true)
		}
		return 0, false
	}
	if n, err := fmr.MapMRSG(t.fsges, 0, 4096); err != nil || n != len(t.fsges) {
		fmr.Dereg()
		return 0, false
	}
	key := verbs.IncKey(fmr.RKey())
	t.fmr = fmr
	// Unsignaled, with an RDMA wr_id: only a failure completes, and it
	// closes the connection as a failed RDMA does.
	t.wrs = append(t.wrs, verbs.SendWR{ID: wridRDMA | uint64(t.idx), Opcode: verbs.WRRegMR,
		Reg: verbs.RegWR{MR: fmr, Key: key, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}})
	d.stats.FastRegs.Add(1)
	return key, true
}

// unmap releases t's registrations; a bounce sink is copied out first
// when copyOut (the data landed).
func (d *Driver) unmap(t *tx, copyOut bool) {
	if t.fmr != nil {
		// The peer's data has landed (or the tx failed): the
		// registration goes, and its key with it.
		t.fmr.Dereg()
		t.fmr = nil
		clear(t.fsges)
		t.fsges = t.fsges[:0]
	}
	for i, e := range t.mrs {
		d.mrs.put(e)
		t.mrs[i] = nil
	}
	t.mrs = t.mrs[:0]
	if t.bounce != nil {
		if copyOut {
			t.sink.CopyFrom(t.bounce.buf[:t.sink.Len])
		}
		d.bounce.put(t.bounce)
		t.bounce = nil
	}
}

// initRDMA builds the RDMA WRITEs moving src into the peer's descriptor
// (t.rdKey, t.rdFrags) followed by the completion message already in
// t.buf (kiblnd_init_rdma). It returns the bytes to move, or an error
// (EMSGSIZE when src exceeds the sink, or registration failure).
func (d *Driver) initRDMA(t *tx, src lnd.IOV) (int, error) {
	t.wrs = t.wrs[:0]
	t.sges = t.sges[:0]
	t.wsges = t.wsges[:0]
	total := 0
	for _, f := range t.rdFrags {
		total += int(f.Nob)
	}
	if src.Len > total {
		return 0, fmt.Errorf("%w: %d bytes into a %d byte sink", lnd.ErrTooBig, src.Len, total)
	}
	// SGEs first (the SGL slices point into t.sges, which must not grow
	// afterwards), then the WRs that cut them along the sink fragments.
	var err error
	walkFrags(src, func(f []byte, off, n int) bool {
		var e *mrEntry
		if e, err = d.mrs.get(f); err != nil {
			return false
		}
		t.mrs = append(t.mrs, e)
		t.sges = append(t.sges, e.mr.SGE(off, n))
		return true
	})
	if err != nil {
		return 0, err
	}
	// Cut the pieces along the sink's fragments (kiblnd_init_rdma): one
	// RDMA WRITE per sink fragment, gathering up to wrqSGE source pieces;
	// a WRITE that would need more goes on in a next one.
	t.wsgeEnd = t.wsgeEnd[:0]
	si, soff := 0, 0 // current source SGE and offset in it
	for _, f := range t.rdFrags {
		foff := 0
		for foff < int(f.Nob) && si < len(t.sges) {
			if len(t.wsgeEnd) == 0 || foff == 0 || len(t.wsges)-t.wsgeStart() >= max(d.wrqSGE, 1) {
				t.wrs = append(t.wrs, verbs.SendWR{
					ID: wridRDMA | uint64(t.idx), Opcode: verbs.WRRDMAWrite,
					RemoteAddr: f.Addr + uint64(foff), RKey: t.rdKey,
				})
				t.wsgeEnd = append(t.wsgeEnd, len(t.wsges))
			}
			s := t.sges[si]
			n := min(int(s.Length)-soff, int(f.Nob)-foff)
			t.wsges = append(t.wsges, verbs.SGE{Addr: s.Addr + uint64(soff), Length: uint32(n), LKey: s.LKey})
			t.wsgeEnd[len(t.wsgeEnd)-1] = len(t.wsges)
			foff += n
			soff += n
			if soff == int(s.Length) {
				si, soff = si+1, 0
			}
		}
	}
	start := 0
	for i, end := range t.wsgeEnd {
		t.wrs[i].SGL = t.wsges[start:end:end]
		start = end
	}
	return src.Len, nil
}
