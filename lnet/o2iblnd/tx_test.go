package o2iblnd

import (
	"slices"
	"testing"

	"softib/internal/testaddr"
	"softib/lnet/lnd"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/lnetwire"
)

func testPD(t *testing.T) verbs.PD {
	t.Helper()
	a := testaddr.Next()
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

func TestMRCache(t *testing.T) {
	c := newMRCache(testPD(t), 3, 10<<10)
	bufs := make([][]byte, 5)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	e0, err := c.get(bufs[0])
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.get(bufs[0])
	if again != e0 || e0.refs.Load() != 2 {
		t.Fatal("same buffer registered twice")
	}
	if sub, _ := c.get(bufs[0][:100]); sub == e0 {
		t.Fatal("a different length shares the registration")
	}
	c.put(e0)
	c.put(e0)
	// Byte bound: 3 × 4 KiB > 10 KiB, so the oldest idle entries go.
	for _, b := range bufs[1:3] {
		e, err := c.get(b)
		if err != nil {
			t.Fatal(err)
		}
		c.put(e)
	}
	if n, bytes := c.stats(); bytes > 10<<10 || n > 3 {
		t.Fatalf("%d entries, %d bytes", n, bytes)
	}
	if e0.mr.RKey() == 0 || c.m[e0.key] != nil {
		t.Fatal("least recently used entry not evicted")
	}
	// Entries in use are never evicted: the cache grows past its bounds.
	var held []*mrEntry
	for _, b := range bufs {
		e, err := c.get(b)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, e)
	}
	if n, _ := c.stats(); n < len(bufs) {
		t.Fatalf("%d entries with %d in use", n, len(bufs))
	}
	for _, e := range held {
		c.put(e)
	}
	c.close()
}

func TestMapSinkAndRDMA(t *testing.T) {
	pd := testPD(t)
	d := &Driver{mrs: newMRCache(pd, 16, 1<<30), bounce: &bouncePool{pd: pd, maxIdle: 1}}
	one := make([]byte, 8192)
	tx1 := &tx{idx: 3}
	key, err := d.mapSink(tx1, lnd.IOV{Frags: [][]byte{one}, Offset: 100, Len: 5000})
	if err != nil || tx1.bounce != nil || len(tx1.frags) != 1 || tx1.frags[0].Nob != 5000 || key == 0 {
		t.Fatalf("single-fragment sink: key %#x frags %+v bounce %v err %v", key, tx1.frags, tx1.bounce != nil, err)
	}
	if tx1.frags[0].Addr != tx1.mrs[0].mr.Addr()+100 {
		t.Fatal("sink address ignores the offset")
	}
	d.unmap(tx1, false)
	// Across fragments: staged through a bounce buffer, copied on success.
	a, b := make([]byte, 10), make([]byte, 10)
	tx2 := &tx{}
	if _, err := d.mapSink(tx2, lnd.IOV{Frags: [][]byte{a, b}, Offset: 5, Len: 10}); err != nil || tx2.bounce == nil {
		t.Fatalf("multi-fragment sink: %v", err)
	}
	copy(tx2.bounce.buf, "0123456789")
	d.unmap(tx2, true)
	if string(a[5:])+string(b[:5]) != "0123456789" {
		t.Fatalf("bounce copy-out: %q %q", a, b)
	}
	// RDMA WRITEs: one per sink fragment, gathering up to wrq_sge source
	// pieces (cut at both boundaries); more pieces go on in a next WRITE.
	type piece struct {
		raddr uint64
		sges  []uint32
	}
	src := lnd.IOV{Frags: [][]byte{make([]byte, 3000), make([]byte, 3000)}, Len: 6000}
	pages := lnd.IOV{Len: 5 * 1000}
	for range 5 {
		pages.Frags = append(pages.Frags, make([]byte, 1000))
	}
	for _, tc := range []struct {
		wrqSGE int
		src    lnd.IOV
		rd     []lnetwire.KibRDMAFrag
		want   []piece
	}{
		{1, src, []lnetwire.KibRDMAFrag{{Nob: 2000, Addr: 0x10000}, {Nob: 5000, Addr: 0x20000}},
			[]piece{{0x10000, []uint32{2000}}, {0x20000, []uint32{1000}}, {0x20000 + 1000, []uint32{3000}}}},
		{2, src, []lnetwire.KibRDMAFrag{{Nob: 2000, Addr: 0x10000}, {Nob: 5000, Addr: 0x20000}},
			[]piece{{0x10000, []uint32{2000}}, {0x20000, []uint32{1000, 3000}}}},
		{2, pages, []lnetwire.KibRDMAFrag{{Nob: 5000, Addr: 0x30000}},
			[]piece{{0x30000, []uint32{1000, 1000}}, {0x30000 + 2000, []uint32{1000, 1000}}, {0x30000 + 4000, []uint32{1000}}}},
		{16, pages, []lnetwire.KibRDMAFrag{{Nob: 5000, Addr: 0x30000}},
			[]piece{{0x30000, []uint32{1000, 1000, 1000, 1000, 1000}}}},
	} {
		d.wrqSGE = tc.wrqSGE
		tx3 := &tx{idx: 7, rdKey: 0x99, rdFrags: tc.rd}
		n, err := d.initRDMA(tx3, tc.src)
		if err != nil || n != tc.src.Len {
			t.Fatal(n, err)
		}
		if len(tx3.wrs) != len(tc.want) {
			t.Fatalf("wrq_sge %d: %d WRs: %+v", tc.wrqSGE, len(tx3.wrs), tx3.wrs)
		}
		for i, w := range tc.want {
			wr := tx3.wrs[i]
			var lens []uint32
			for _, g := range wr.SGL {
				lens = append(lens, g.Length)
			}
			if wr.RemoteAddr != w.raddr || !slices.Equal(lens, w.sges) || wr.RKey != 0x99 || wr.Opcode != verbs.WRRDMAWrite ||
				wr.ID != wridRDMA|7 || wr.Flags&verbs.SendSignaled != 0 {
				t.Fatalf("wrq_sge %d: WR %d: %+v, want %+v", tc.wrqSGE, i, wr, w)
			}
		}
		d.unmap(tx3, false)
	}
	if _, err := d.initRDMA(&tx{rdFrags: []lnetwire.KibRDMAFrag{{Nob: 10}}}, src); err == nil {
		t.Fatal("source larger than the sink accepted")
	}
}
