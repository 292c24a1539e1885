package perftestcm

import (
	"bytes"
	"errors"
	"testing"

	"softib/tools/perftest"
	"softib/verbs"
)

func TestDestLayout(t *testing.T) {
	k := perftest.Key{LID: 0x1234, OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0xdeadbeef,
		VAddr: 0x0102030405060708, GID: verbs.GID{0: 0xfe, 15: 0x01}, SRQN: 5, HasGID: true}
	b := AppendDest(nil, k, 1)
	if len(b) != DestLen {
		t.Fatalf("%d bytes", len(b))
	}
	want := []byte{0, 0, 0x12, 0x34, 0, 0, 0, 16, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef, 0xde, 0xad, 0xbe, 0xef,
		0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 1}
	if !bytes.Equal(b, want) {
		t.Fatalf("\n% x\n% x", b, want)
	}
	got, gi, err := ParseDest(b)
	if err != nil || got != k || gi != 1 {
		t.Fatalf("%+v %d %v", got, gi, err)
	}
	if _, _, err := ParseDest(b[:55]); !errors.Is(err, ErrShortDest) {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { b = AppendDest(b[:0], k, 1) }); n != 0 {
		t.Errorf("AppendDest allocates %v", n)
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add(AppendDest(nil, perftest.Key{}, -1))
	f.Add(AppendDest(nil, perftest.Key{LID: 1, OutReads: 2, QPN: 3, PSN: 4, RKey: 5, VAddr: 6, SRQN: 7, HasGID: true}, 1))
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, gi, err := ParseDest(b)
		if err != nil {
			return
		}
		// Fields wider on the wire than in Key (lid, out_reads) and the
		// padding do not round-trip; everything Key holds does.
		k2, gi2, err := ParseDest(AppendDest(nil, k, gi))
		if err != nil || k2 != k || gi2 != gi {
			t.Fatalf("round trip %+v -> %+v", k, k2)
		}
	})
}
