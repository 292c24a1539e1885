package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"softib/tools/internal/rdmautil"
	"softib/verbs"
)

// Resources are the verbs objects of a run.
type Resources struct {
	Dev    verbs.Device
	PD     verbs.PD
	Engine *Engine
	// Local and Remote are the per-QP keys of both ends.
	Local  []Key
	Remote []Key
	// MTU is the negotiated path MTU; GIDIndex the source GID index.
	MTU      verbs.MTU
	GIDIndex int
	OutReads int
}

// Close releases the resources.
func (r *Resources) Close() {
	if r.Engine != nil {
		for _, ah := range r.Engine.AHs {
			if ah != nil {
				ah.Destroy()
			}
		}
		for _, qp := range r.Engine.QPs {
			qp.Destroy()
		}
		if r.Engine.SendCQ != nil {
			r.Engine.SendCQ.Destroy()
		}
		if r.Engine.RecvCQ != nil {
			r.Engine.RecvCQ.Destroy()
		}
		if r.Engine.MR != nil {
			r.Engine.MR.Dereg()
		}
	}
	if r.PD != nil {
		r.PD.Dealloc()
	}
}

// accessFor returns the MR and QP access a verb's target needs.
func accessFor(v Verb) (mr, qp verbs.AccessFlags) {
	switch v {
	case VerbWrite:
		return verbs.AccessLocalWrite | verbs.AccessRemoteWrite, verbs.AccessRemoteWrite
	case VerbRead:
		return verbs.AccessLocalWrite | verbs.AccessRemoteRead, verbs.AccessRemoteRead
	case VerbAtomic:
		return verbs.AccessLocalWrite | verbs.AccessRemoteAtomic, verbs.AccessRemoteAtomic
	}
	return verbs.AccessLocalWrite, verbs.AccessRemoteWrite | verbs.AccessLocalWrite
}

// BestGIDIndex picks the source GID as perftest does on RoCE when -x is
// not given: the first IPv4-mapped entry, else index 0.
func BestGIDIndex(dev verbs.Device, port uint8) int {
	tbl, err := dev.GIDTable(port)
	if err != nil {
		return 0
	}
	for _, e := range tbl {
		if e.GID.IsIPv4() {
			return e.Index
		}
	}
	return 0
}

// NewResources creates PD, MR, CQs and QPs (in INIT) for cfg and fills
// the local keys. cycle is the negotiated cycle buffer.
func NewResources(dev verbs.Device, cfg *Config, mtu verbs.MTU, cycle, cacheLine int) (*Resources, error) {
	res := &Resources{Dev: dev, MTU: mtu, GIDIndex: cfg.GIDIndex}
	ok := false
	defer func() {
		if !ok {
			res.Close()
		}
	}()
	if res.GIDIndex < 0 {
		res.GIDIndex = BestGIDIndex(dev, cfg.Port)
	}
	gid, err := dev.QueryGID(cfg.Port, res.GIDIndex)
	if err != nil {
		return nil, fmt.Errorf("query GID %d: %w", res.GIDIndex, err)
	}
	pa, err := dev.QueryPort(cfg.Port)
	if err != nil {
		return nil, fmt.Errorf("query port %d: %w", cfg.Port, err)
	}
	v := cfg.Test.Verb()
	res.OutReads = 1
	if v == VerbRead || v == VerbAtomic {
		res.OutReads = dev.Query().MaxQPRdAtom
		if cfg.OutReads > 0 && cfg.OutReads < res.OutReads {
			res.OutReads = cfg.OutReads
		}
		res.OutReads = max(min(res.OutReads, 0xffff), 1)
	}
	if res.PD, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("couldn't allocate PD: %w", err)
	}
	region := max(cfg.maxSize(), cycle)
	if cfg.UD {
		region = max(cfg.maxSize()+GRHLen, cycle)
	}
	region = (region + cacheLine - 1) / cacheLine * cacheLine
	nq := cfg.QPs
	mrAccess, qpAccess := accessFor(v)
	e := &Engine{Region: region, Verb: v, Atomic: cfg.Atomic, TxDepth: cfg.TxDepth, CQMod: cfg.CQMod,
		RxDepth: cfg.RxDepth, Cycle: cycle, CacheLine: cacheLine, Events: cfg.Events, PostList: cfg.PostList, UD: cfg.UD}
	if cfg.UD || cfg.UC {
		// A lost message never arrives: after a minute without one
		// the receiver reports what it has, as perftest's check_alive.
		e.RecvIdle = UnreliableIdle
	}
	res.Engine = e
	// One spare region absorbs a peer's address walk past the last one.
	if e.MR, err = res.PD.RegMR(make([]byte, (2*nq+1)*region), mrAccess); err != nil {
		return nil, fmt.Errorf("couldn't register MR of %d bytes: %w", (2*nq+1)*region, err)
	}
	if e.SendCQ, err = rdmautil.NewCQ(dev, cfg.TxDepth*nq+1); err != nil {
		return nil, fmt.Errorf("couldn't create send CQ: %w", err)
	}
	if e.RecvCQ, err = rdmautil.NewCQ(dev, cfg.RxDepth*nq+1); err != nil {
		return nil, fmt.Errorf("couldn't create receive CQ: %w", err)
	}
	inline := 0
	if cfg.Test.IsLat() {
		switch {
		case v == VerbWrite:
			inline = 220
		case v == VerbSend && cfg.UD:
			inline = 188 // DEF_INLINE_SEND_UD
		case v == VerbSend:
			inline = 236
		}
	}
	switch {
	case cfg.Inline > 0:
		inline = cfg.Inline
	case cfg.Inline < 0:
		inline = 0
	}
	rx := 1
	if v == VerbSend {
		rx = cfg.RxDepth
	}
	for i := range nq {
		qpType := verbs.QPTypeRC
		switch {
		case cfg.UC:
			qpType = verbs.QPTypeUC
		case cfg.UD:
			qpType = verbs.QPTypeUD
		}
		qp, err := res.PD.CreateQP(&verbs.QPInitAttr{Type: qpType, SendCQ: e.SendCQ, RecvCQ: e.RecvCQ,
			Cap: verbs.QPCap{MaxSendWR: cfg.TxDepth, MaxRecvWR: rx, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: inline}})
		if err != nil {
			return nil, fmt.Errorf("couldn't create QP %d: %w", i, err)
		}
		e.QPs = append(e.QPs, qp)
		if _, ia, err := qp.Query(); err == nil {
			inline = min(inline, ia.Cap.MaxInlineData)
		}
		if cfg.UD {
			// ctx_modify_qp_to_init: UD QPs take the Q_Key, no access.
			a := verbs.QPAttr{State: verbs.QPStateInit, PortNum: cfg.Port, QKey: QKey}
			if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
				return nil, fmt.Errorf("modify UD QP to INIT: %w", err)
			}
		} else if err := rdmautil.ToInit(qp, cfg.Port, qpAccess); err != nil {
			return nil, err
		}
		// Not e.TargetOff(i): e.QPs is still growing here, and with -q N
		// that announced QP i's target inside QP i+1's source region
		// (under -b, the peer's READs raced this side's).
		res.Local = append(res.Local, Key{LID: pa.LID, OutReads: uint16(res.OutReads), QPN: qp.QPN(),
			PSN: rdmautil.RandPSN(), RKey: e.MR.RKey(), VAddr: e.MR.Addr() + uint64((nq+i)*region),
			GID: gid, HasGID: true})
	}
	e.Inline = max(inline, 0)
	ok = true
	return res, nil
}

// Connect moves every QP to RTR, and to RTS when this side sends (latency
// tests and BW clients), with perftest's attributes (ctx_connect).
func (r *Resources) Connect(cfg *Config, client bool) error {
	for i, qp := range r.Engine.QPs {
		rem := r.Remote[i]
		if rem.GID.IsZero() {
			return fmt.Errorf("peer QP %#x sent no GID: RoCE needs one (run the peer with -x 1)", rem.QPN)
		}
		c := rdmautil.RCConnect{MTU: r.MTU, DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: r.Local[i].PSN,
			AV:              rdmautil.AV(cfg.Port, rdmautil.Peer{LID: rem.LID, GID: rem.GID, DPort: cfg.PeerUDPPort}, r.GIDIndex, HopLimit, cfg.SL),
			MaxDestRdAtomic: uint8(min(r.OutReads, 255)), MinRNRTimer: MinRNRTimer,
			Timeout: DefaultQPTimeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: uint8(min(max(int(rem.OutReads), 1), 255))}
		c.AV.GRH.TrafficClass = cfg.TClass // --tclass (the IP TOS on RoCE)
		sends := cfg.Test.IsLat() || client || cfg.Duplex
		if cfg.UD {
			if err := udConnect(r, i, &c, sends); err != nil {
				return fmt.Errorf("qp %d: %w", i, err)
			}
			continue
		}
		if cfg.UC {
			if err := ucConnect(qp, &c, sends); err != nil {
				return fmt.Errorf("qp %d: %w", i, err)
			}
			continue
		}
		if err := rdmautil.ToRTR(qp, &c); err != nil {
			return fmt.Errorf("qp %d: %w", i, err)
		}
		if sends {
			if err := rdmautil.ToRTS(qp, &c); err != nil {
				return fmt.Errorf("qp %d: %w", i, err)
			}
		}
	}
	r.Engine.Remote = r.Remote
	return nil
}

// openTCP connects the control channel (client) or accepts one (server).
func openTCP(ctx context.Context, cfg *Config) (*TCPCtrl, error) {
	client := cfg.Host != ""
	if client {
		var d net.Dialer
		if cfg.BindAddr.IsValid() {
			// Leave from the device's address, not the kernel's choice
			// (127.0.0.1 towards any 127.0.0.x server).
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(cfg.BindAddr, 0))
		}
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.TCPPort))
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("couldn't connect to %s: %w (is the server running?)", addr, err)
		}
		return NewTCPCtrl(conn, true), nil
	}
	ln := cfg.Listener
	if ln == nil {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", listenAddr(cfg.BindAddr, cfg.TCPPort))
		if err != nil {
			return nil, fmt.Errorf("couldn't listen on port %d: %w", cfg.TCPPort, err)
		}
		defer l.Close()
		ln = l
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("accept: %w", err)
	}
	return NewTCPCtrl(conn, false), nil
}

// Run runs one perftest test on dev, writing perftest's output to cfg.Out,
// and returns the rows it printed.
func Run(ctx context.Context, dev verbs.Device, cfg Config) ([]Row, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Test.Verb() == VerbSend && cfg.Duration == 0 {
		cfg.RxDepth = min(cfg.RxDepth, cfg.Iters)
	}
	client := cfg.Host != ""
	if !client {
		fmt.Fprint(cfg.Out, WaitingBanner)
	}
	var ctrl Ctrl
	var err error
	if cfg.RDMACM {
		ctrl, err = cfg.CM.Control(ctx, dev, &cfg)
	} else {
		ctrl, err = openTCP(ctx, &cfg)
	}
	if err != nil {
		return nil, err
	}
	defer ctrl.Close()
	stop := context.AfterFunc(ctx, func() { ctrl.Close() })
	defer stop()
	p := &Proto{Ctrl: ctrl}
	rows, err := run(ctx, dev, &cfg, p, client)
	if err != nil && ctx.Err() != nil {
		return rows, fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return rows, err
}

func run(ctx context.Context, dev verbs.Device, cfg *Config, p *Proto, client bool) ([]Row, error) {
	_, remVer, err := p.Versions(Version)
	if err != nil {
		return nil, err
	}
	cycle, cacheLine, err := p.SysData(remVer, DefaultCycle, DefaultCacheLine)
	if err != nil {
		return nil, err
	}
	pa, err := dev.QueryPort(cfg.Port)
	if err != nil {
		return nil, fmt.Errorf("query port %d: %w", cfg.Port, err)
	}
	mtu := pa.ActiveMTU
	if cfg.MTU != 0 {
		mtu = verbs.MTUFromBytes(cfg.MTU)
	}
	if mtu, err = p.MTU(remVer, mtu); err != nil {
		return nil, err
	}
	if cfg.UD {
		cfg.udMTU = mtu.Bytes()
	}
	if cfg.UD && cfg.maxSize() > mtu.Bytes() {
		// A datagram is one packet.
		if !cfg.defaultSize && !cfg.AllSizes {
			return nil, fmt.Errorf("-c UD -s %d: Max msg size in UD is MTU %d", cfg.Size, mtu.Bytes())
		}
		cfg.Size = mtu.Bytes()
	}
	res, err := NewResources(dev, cfg, mtu, cycle, cacheLine)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	e := res.Engine
	WriteBanner(cfg.Out, &Banner{Test: cfg.Test, Atomic: cfg.Atomic, Device: dev.Name(), QPs: cfg.QPs, Client: client,
		TxDepth: cfg.TxDepth, RxDepth: cfg.RxDepth, CQMod: cfg.CQMod, MTU: mtu, GIDIndex: res.GIDIndex,
		Inline: e.Inline, OutReads: res.OutReads, RDMACM: cfg.RDMACM, UC: cfg.UC, UD: cfg.UD,
		Duplex: cfg.Duplex, PostList: cfg.PostList, TOS: cfg.TOS})

	res.Remote = make([]Key, cfg.QPs)
	hs0 := func() error {
		_, err := p.HandShake(res.Local[0])
		return err
	}
	hsAll := func() error {
		for i := range res.Local {
			k, err := p.HandShake(res.Local[i])
			if err != nil {
				return err
			}
			res.Remote[i] = k
		}
		return nil
	}
	connect := func() error {
		if cfg.RDMACM {
			return cfg.CM.Connect(ctx, cfg, p.Ctrl, res)
		}
		return res.Connect(cfg, client)
	}
	printAddrs := func() error {
		for i := range res.Local {
			fmt.Fprint(cfg.Out, AddressLines("local", e.Verb, &res.Local[i]))
		}
		if err := hsAll(); err != nil {
			return err
		}
		for i := range res.Remote {
			fmt.Fprint(cfg.Out, AddressLines("remote", e.Verb, &res.Remote[i]))
		}
		return nil
	}
	// Connection sequence (perftest 6.06 main()s): latency tests but
	// send_lat start with one extra handshake; send tests sync once more
	// before the second key round, the others after it.
	// With -R the test QPs connect first (create_rdma_cm_connection
	// comes right after the MTU exchange) and the key rounds follow.
	t := cfg.Test
	steps := []func() error{}
	if cfg.RDMACM {
		steps = append(steps, connect)
	}
	if t.IsLat() && t != SendLat {
		steps = append(steps, hs0)
	}
	steps = append(steps, hsAll)
	if !cfg.RDMACM {
		steps = append(steps, connect)
	}
	if t.Verb() == VerbSend {
		steps = append(steps, hs0, printAddrs)
	} else {
		steps = append(steps, printAddrs, hs0)
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if client || !(t == ReadLat || t == AtomicLat) {
		fmt.Fprint(cfg.Out, ResultLine)
		fmt.Fprint(cfg.Out, Header(t, cfg.ReportGbits, cfg.Duration > 0))
	}

	var rows []Row
	emit := func(r Row) {
		rows = append(rows, r)
		cfg.Out.Write(AppendRow(nil, &r))
		if cfg.OnResult != nil {
			cfg.OnResult(r)
		}
	}
	// emitQP adds a per-QP row (-q N), printed as a line of its own
	// under the aggregate.
	emitQP := func(r Row) {
		rows = append(rows, r)
		fmt.Fprintf(cfg.Out, "   QP %-4d  %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.QP, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		if cfg.OnResult != nil {
			cfg.OnResult(r)
		}
	}
	emitQPs := func(s *Sample, dir string) {
		for _, r := range perQPRows(cfg, s) {
			r.Direction = dir
			emitQP(r)
		}
	}
	// emitDuplex adds a bidirectional row: the sum of the local row and
	// the peer's report (xchg_bw_reports + print_full_bw_report), then
	// with --report-both each direction under a table of its own.
	emitDuplex := func(local Row, s *Sample) error {
		rem, err := p.Reports(remVer, ptr(ReportOf(&local)))
		if err != nil {
			return err
		}
		emit(SumRow(local, &rem))
		local.Direction = DirLocal
		emitQPs(s, DirLocal)
		if cfg.ReportBoth {
			remote := RowFromReport(t, &rem, cfg.ReportGbits)
			remote.Direction = DirRemote
			for _, side := range []struct {
				title string
				r     Row
			}{{"Local", local}, {"Remote", remote}} {
				fmt.Fprintf(cfg.Out, "%s\n %s results: \n%s", ResultLine, side.title, ResultLine)
				fmt.Fprint(cfg.Out, Header(t, cfg.ReportGbits, false))
				emit(side.r)
			}
		}
		return nil
	}
	deadline := func() time.Time {
		if cfg.Duration > 0 {
			return time.Now().Add(cfg.Duration)
		}
		return time.Time{}
	}
	latRow := func(s *Sample) Row {
		if cfg.Duration > 0 {
			return LatDurRow(t, s)
		}
		return LatRow(t, s)
	}
	// emitLat adds a latency row, then -U's unsorted samples and -H's
	// histogram.
	emitLat := func(s *Sample) {
		emit(latRow(s))
		if !cfg.LatUnsorted && !cfg.LatHistogram {
			return
		}
		d := LatSamples(s)
		if cfg.LatUnsorted {
			fmt.Fprintf(cfg.Out, "#, usec\n")
			for i, v := range d {
				fmt.Fprintf(cfg.Out, "%d, %.3f\n", i+1, v)
			}
		}
		if cfg.LatHistogram {
			fmt.Fprintf(cfg.Out, "usec (bucket start, 1 usec wide), count\n")
			for _, b := range LatHistogram(d) {
				fmt.Fprintf(cfg.Out, "%d, %d\n", b.Usec, b.Count)
			}
		}
	}
	finish := func() ([]Row, error) {
		fmt.Fprint(cfg.Out, ResultLine)
		return rows, nil
	}

	switch t {
	case WriteBW, ReadBW, AtomicBW:
		if !client && !cfg.Duplex {
			// The server waits for the client's results.
			if err := hs0(); err != nil {
				return nil, err
			}
			rep, err := p.Reports(remVer, &BWReport{})
			if err != nil {
				return nil, err
			}
			emit(RowFromReport(t, &rep, cfg.ReportGbits))
			if err := p.Close(res.Local[0]); err != nil {
				return nil, err
			}
			return finish()
		}
		var last Row
		if cfg.RunInfinitely {
			// A row every Duration until Ctrl-C: the server's
			// report exchange never comes. With -b both sides send
			// and each counts its own direction twice, as perftest
			// does (run_inf_bi_factor).
			for {
				s, err := e.BW(ctx, cfg.Size, cfg.Iters, deadline())
				if err != nil {
					return rows, err
				}
				r := bwRow(cfg, s)
				r.BWPeak = 0 // perftest: noPeak in run_infinitely
				if cfg.Duplex {
					r.BWAvg, r.MsgRate, r.Direction = 2*r.BWAvg, 2*r.MsgRate, DirBoth
				}
				emit(r)
				emitQPs(s, "")
			}
		}
		for _, size := range cfg.sizes() {
			if cfg.Duplex {
				// Both sides start together.
				if err := hs0(); err != nil {
					return rows, err
				}
			}
			s, err := e.BW(ctx, size, cfg.Iters, deadline())
			if errors.Is(err, ErrInterrupted) {
				emit(bwRow(cfg, s))
				fmt.Fprintf(cfg.Out, " interrupted: the row above is a partial result (%d iterations)\n", s.Iters)
			}
			if err != nil {
				return rows, err
			}
			last = bwRow(cfg, s)
			if cfg.Duplex {
				if cfg.AllSizes {
					// perftest ≥ 4.6 syncs again after each size.
					if err := hs0(); err != nil {
						return rows, err
					}
				}
				if err := emitDuplex(last, s); err != nil {
					return rows, err
				}
				continue
			}
			emit(last)
			emitQPs(s, "")
		}
		if cfg.Duplex {
			fmt.Fprint(cfg.Out, ResultLine)
			if err := p.Close(res.Local[0]); err != nil {
				return rows, err
			}
			return rows, nil
		}
		if err := hs0(); err != nil {
			return rows, err
		}
		my := ReportOf(&last)
		if _, err := p.Reports(remVer, &my); err != nil {
			return rows, err
		}
		if err := p.Close(res.Local[0]); err != nil {
			return rows, err
		}
		return finish()

	case SendBW:
		if cfg.RunInfinitely {
			// Both sides report every Duration until Ctrl-C
			// (run_iter_bw_infinitely and its _server).
			if !client {
				if err := e.PostRecvs(cfg.Size); err != nil {
					return rows, err
				}
				e.StrictDeadline = true
			}
			if err := hs0(); err != nil {
				return rows, err
			}
			for {
				var s *Sample
				if client {
					s, err = e.BW(ctx, cfg.Size, cfg.Iters, deadline())
				} else {
					s, err = e.RecvBW(ctx, cfg.Size, cfg.Iters, deadline())
				}
				if err != nil {
					return rows, err
				}
				r := bwRow(cfg, s)
				r.BWPeak = 0
				emit(r)
				emitQPs(s, "")
			}
		}
		for _, size := range cfg.sizes() {
			if !client || cfg.Duplex {
				if err := e.PostRecvs(size); err != nil {
					return rows, err
				}
			}
			if err := hs0(); err != nil {
				return rows, err
			}
			var s *Sample
			switch {
			case cfg.Duplex:
				s, _, err = e.BiSend(ctx, size, cfg.Iters, deadline(), !client)
			case client:
				s, err = e.BW(ctx, size, cfg.Iters, deadline())
			default:
				s, err = e.RecvBW(ctx, size, cfg.Iters, deadline())
			}
			if errors.Is(err, ErrInterrupted) {
				emit(bwRow(cfg, s))
				fmt.Fprintf(cfg.Out, " interrupted: the row above is a partial result (%d iterations)\n", s.Iters)
			}
			if err != nil {
				return rows, err
			}
			if s.Idle {
				fmt.Fprintf(cfg.Out, " Did not get Message for %v, exiting..\n Total Received=%d, Total Iters Required=%d\n",
					UnreliableIdle, s.Iters, cfg.Iters*cfg.QPs)
			}
			switch {
			case cfg.Duplex && cfg.Duration == 0:
				if err := emitDuplex(bwRow(cfg, s), s); err != nil {
					return rows, err
				}
			case cfg.Duplex:
				// perftest: a -D bidirectional send test reports
				// each side's own sends, with no exchange.
				r := bwRow(cfg, s)
				r.Direction = DirLocal
				emit(r)
				emitQPs(s, DirLocal)
			default:
				emit(bwRow(cfg, s))
				emitQPs(s, "")
			}
			if cfg.AllSizes {
				if err := hs0(); err != nil {
					return rows, err
				}
			}
		}
		if err := p.Close(res.Local[0]); err != nil {
			return rows, err
		}
		return finish()

	case WriteLat:
		for _, size := range cfg.sizes() {
			s, err := e.WriteLat(ctx, size, cfg.Iters, client, deadline())
			if err != nil {
				return rows, err
			}
			emitLat(s)
		}
		return finish()

	case ReadLat, AtomicLat:
		if !client {
			if err := p.Close(res.Local[0]); err != nil {
				return nil, err
			}
			return finish()
		}
		for _, size := range cfg.sizes() {
			s, err := e.LatReq(ctx, size, cfg.Iters, deadline())
			if err != nil {
				return rows, err
			}
			emitLat(s)
		}
		if err := p.Close(res.Local[0]); err != nil {
			return rows, err
		}
		return finish()

	case SendLat:
		for _, size := range cfg.sizes() {
			if err := e.PostRecvs(size); err != nil {
				return rows, err
			}
			if err := hs0(); err != nil {
				return rows, err
			}
			s, err := e.SendLat(ctx, size, cfg.Iters, client, deadline())
			if err != nil {
				return rows, err
			}
			emitLat(s)
		}
		if err := p.Close(res.Local[0]); err != nil {
			return rows, err
		}
		return finish()
	}
	return nil, errors.New("perftest: unknown test")
}

// listenAddr is the exchange listener's address: the device's address when
// one was chosen (servers on 127.0.0.2 and 127.0.0.3 share a port), else
// every address, as perftest listens.
func listenAddr(a netip.Addr, port int) string {
	if !a.IsValid() {
		return ":" + strconv.Itoa(port)
	}
	return netip.AddrPortFrom(a, uint16(port)).String()
}

func ptr[T any](v T) *T { return &v }

// bwRow is BWRow with -N (no peak) applied.
func bwRow(cfg *Config, s *Sample) Row {
	r := BWRow(cfg.Test, s, cfg.ReportGbits)
	if cfg.NoPeak {
		r.BWPeak = 0
	}
	return r
}

// perQPRows are the rows of -q N under the aggregate: each QP's messages
// over the sample's time (no peak: the windows are the aggregate's), so
// that the scaling over QPs shows.
func perQPRows(cfg *Config, s *Sample) []Row {
	if len(s.PerQP) < 2 {
		return nil
	}
	var rows []Row
	for qi, n := range s.PerQP {
		q := *s
		q.Iters, q.Posted, q.Completed = n, nil, nil
		r := BWRow(cfg.Test, &q, cfg.ReportGbits)
		r.BWPeak, r.QP = 0, qi+1
		rows = append(rows, r)
	}
	return rows
}

// UnreliableIdle is how long a UC/UD receiver waits for a message before
// it reports what arrived (perftest's check_alive: 60 s alarms).
const UnreliableIdle = 60 * time.Second

// udConnect moves UD QP i (in INIT with the Q_Key) to RTR, and to RTS with
// an address handle toward its peer when it sends.
func udConnect(r *Resources, i int, c *rdmautil.RCConnect, sends bool) error {
	qp := r.Engine.QPs[i]
	a := verbs.QPAttr{State: verbs.QPStateRTR}
	if err := qp.Modify(&a, verbs.QPAttrState); err != nil {
		return fmt.Errorf("modify UD QP to RTR: %w", err)
	}
	if !sends {
		return nil
	}
	a = verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: c.SQPSN}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("modify UD QP to RTS: %w", err)
	}
	ah, err := r.PD.CreateAH(&c.AV)
	if err != nil {
		return fmt.Errorf("create AH: %w", err)
	}
	if r.Engine.AHs == nil {
		r.Engine.AHs = make([]verbs.AH, len(r.Engine.QPs))
	}
	r.Engine.AHs[i] = ah
	return nil
}

// ucConnect moves a UC QP to RTR, and to RTS when rts: UC has no
// acknowledgements, so none of RC's read/atomic, RNR or retry attributes.
func ucConnect(qp verbs.QP, c *rdmautil.RCConnect, rts bool) error {
	a := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: c.MTU, DestQPN: c.DestQPN, RQPSN: c.RQPSN, AH: c.AV}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN); err != nil {
		return fmt.Errorf("modify UC QP to RTR: %w", err)
	}
	if !rts {
		return nil
	}
	a = verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: c.SQPSN}
	if err := qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return fmt.Errorf("modify UC QP to RTS: %w", err)
	}
	return nil
}
