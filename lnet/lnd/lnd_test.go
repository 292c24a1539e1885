package lnd_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// fragment cuts b into random pieces (some empty).
func fragment(r *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := r.IntN(len(b) + 1)
		if r.IntN(8) == 0 {
			n = 0
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func TestIOVAgainstFlat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := r.IntN(300)
		flat := make([]byte, n)
		for i := range flat {
			flat[i] = byte(r.Uint32())
		}
		frags := fragment(r, flat)
		off := r.IntN(n + 1)
		ln := r.IntN(n - off + 1)
		v := lnd.IOV{Frags: frags, Offset: off, Len: ln}
		want := flat[off : off+ln]

		got := make([]byte, ln+5)
		if c := v.CopyTo(got); c != ln || !bytes.Equal(got[:c], want) {
			t.Fatalf("CopyTo %d", c)
		}
		var walked []byte
		v.Walk(func(b []byte) bool { walked = append(walked, b...); return true })
		if !bytes.Equal(walked, want) {
			t.Fatal("Walk")
		}
		var joined []byte
		for _, b := range v.AppendBuffers(nil) {
			joined = append(joined, b...)
		}
		if !bytes.Equal(joined, want) {
			t.Fatal("AppendBuffers")
		}
		so, sl := r.IntN(ln+2), r.IntN(ln+2)
		sub := v.Slice(so, sl)
		so2 := min(so, ln)
		if sub.CopyTo(got) != min(sl, ln-so2) || !bytes.Equal(got[:sub.Len], want[so2:so2+sub.Len]) {
			t.Fatal("Slice")
		}

		// CopyFrom into a fragmented copy, and CopyIOV between two
		// differently fragmented buffers.
		dstFlat := make([]byte, n)
		dst := lnd.IOV{Frags: fragment(r, dstFlat), Offset: off, Len: ln}
		if c := dst.CopyFrom(want); c != ln || !bytes.Equal(dstFlat[off:off+ln], want) {
			t.Fatalf("CopyFrom %d", c)
		}
		other := make([]byte, n)
		o := lnd.IOV{Frags: fragment(r, other), Offset: 0, Len: ln}
		if c := lnd.CopyIOV(o, v); c != ln || !bytes.Equal(other[:ln], want) {
			t.Fatalf("CopyIOV %d", c)
		}
		if w := lnd.Whole(frags); w.Len != n {
			t.Fatal("Whole")
		}
	}
	// Early stop in Walk.
	calls := 0
	lnd.IOV{Frags: [][]byte{{1}, {2}, {3}}, Len: 3}.Walk(func([]byte) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("Walk did not stop: %d", calls)
	}
}

func TestIOVAllocs(t *testing.T) {
	src := lnd.Whole([][]byte{make([]byte, 1000), make([]byte, 3000)})
	dst := lnd.Whole([][]byte{make([]byte, 2500), make([]byte, 1500)})
	var scratch [][]byte
	n := testing.AllocsPerRun(100, func() {
		lnd.CopyIOV(dst, src)
		scratch = src.AppendBuffers(scratch[:0])
	})
	if n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

type fakeLND struct{ t lnetwire.LNDType }

func (f fakeLND) Type() lnetwire.LNDType              { return f.t }
func (f fakeLND) Startup(*lnd.NI) (lnd.Driver, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	r := lnd.NewRegistry(fakeLND{lnetwire.O2IBLND}, fakeLND{lnetwire.SOCKLND})
	if err := r.Register(fakeLND{lnetwire.SOCKLND}); err == nil {
		t.Fatal("duplicate registered")
	}
	if l, ok := r.Lookup(lnetwire.O2IBLND); !ok || l.Type() != lnetwire.O2IBLND {
		t.Fatal("lookup")
	}
	if _, ok := r.Lookup(lnetwire.LOLND); ok {
		t.Fatal("lookup of missing type")
	}
	if ts := r.Types(); len(ts) != 2 || ts[0] != lnetwire.SOCKLND || ts[1] != lnetwire.O2IBLND {
		t.Fatalf("types %v", ts)
	}
	var zero lnd.Registry
	if err := zero.Register(fakeLND{lnetwire.LOLND}); err != nil {
		t.Fatal(err)
	}
}

func TestTunablesDefaults(t *testing.T) {
	got := lnd.Tunables{PeerCredits: 16}.WithDefaults(lnd.DefaultTunables)
	want := lnd.Tunables{Credits: 256, PeerCredits: 16, PeerBufferCredits: 8, PeerTimeout: 180 * time.Second}
	if got != want {
		t.Fatalf("got %+v want %+v", got, want)
	}
	got = lnd.Tunables{PeerCredits: 16}.WithDefaults(lnd.Tunables{})
	if got.PeerBufferCredits != 16 {
		t.Fatalf("peer buffer credits default to peer credits: %+v", got)
	}
}

// host records what a driver calls, for NewNI.
type host struct{ parsed int }

func (h *host) Parse(*lnd.NI, *lnetwire.Header, lnetwire.NID, any, bool) error {
	h.parsed++
	return nil
}
func (h *host) Finalize(*lnd.NI, *lnd.Msg, error)                  {}
func (h *host) CreateReplyMsg(*lnd.NI, *lnd.Msg) (*lnd.Msg, error) { return nil, nil }
func (h *host) SetReplyMsgLen(*lnd.NI, *lnd.Msg, int)              {}
func (h *host) NotifyPeer(*lnd.NI, lnetwire.NID, bool, time.Time)  {}

func TestNewNI(t *testing.T) {
	h := &host{}
	ni := lnd.NewNI(h, lnd.NIConfig{NID: lnetwire.MustParseNID("1.2.3.4@tcp2")})
	if ni.Log == nil || ni.Net() != lnetwire.MakeNet(lnetwire.SOCKLND, 2) {
		t.Fatal("NewNI defaults")
	}
	var hdr lnetwire.Header
	if err := ni.Parse(&hdr, 0, nil, false); err != nil || h.parsed != 1 {
		t.Fatal("Parse not forwarded")
	}
	m := &lnd.Msg{}
	m.SetOwner(42)
	if m.Owner() != 42 {
		t.Fatal("owner")
	}
}
