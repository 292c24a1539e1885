package rping

import (
	"bytes"
	"errors"
	"testing"
)

func TestInfoEncoding(t *testing.T) {
	m := Info{Buf: 0x0102030405060708, RKey: 0x0a0b0c0d, Size: 64}
	b := m.Append(nil)
	w := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 64}
	if !bytes.Equal(b, w) || m.Len() != len(b) {
		t.Fatalf("% x", b)
	}
	got, err := ParseInfo(b)
	if err != nil || got != m {
		t.Fatalf("%+v %v", got, err)
	}
	for _, n := range []int{0, 15, 17} {
		if _, err := ParseInfo(make([]byte, n)); !errors.Is(err, ErrBadInfo) {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
}

func TestPattern(t *testing.T) {
	var p Pattern
	buf := make([]byte, 40)
	p.Fill(buf, 0)
	if s := string(buf); s != "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ\x00" {
		t.Fatalf("%q", s)
	}
	p.Fill(buf, 1)
	if s := string(buf); s != "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\x00" {
		t.Fatalf("%q", s)
	}
	// The start wraps from 'z' back to 'A' after 58 iterations, and so
	// does the fill within one buffer.
	for i := 2; i < 58; i++ {
		p.Fill(buf, i)
	}
	p.Fill(buf, 58)
	if s := string(buf[:16]); s != "rdma-ping-58: AB" {
		t.Fatalf("%q", s)
	}
	big := make([]byte, 100)
	var q Pattern
	q.Fill(big, 0)
	if i := bytes.IndexByte(big, 'z'); big[i+1] != 'A' {
		t.Fatalf("no wrap: %q", big)
	}
	if n := testing.AllocsPerRun(100, func() { q.Fill(big, 123456) }); n != 0 {
		t.Errorf("Fill allocates %v times", n)
	}
}

func FuzzParseInfo(f *testing.F) {
	f.Add(Info{}.Append(nil))
	f.Add(Info{Buf: 0xdeadbeef, RKey: 7, Size: 64}.Append(nil))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseInfo(b)
		if err != nil {
			return
		}
		if !bytes.Equal(m.Append(nil), b) {
			t.Fatalf("round trip of % x", b)
		}
	})
}
