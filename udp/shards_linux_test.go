package udp_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"softib/internal/testaddr"
	"softib/udp"
)

// TestListenShardsFlowsStayOnOneShard sends numbered datagrams from many
// source sockets to a 4-shard group and checks what the receive shards
// rely on: every flow lands on one shard, in order, and the flows spread
// over more than one shard.
func TestListenShardsFlowsStayOnOneShard(t *testing.T) {
	const shards, flows, per = 4, 32, 20
	ip := testaddr.Next()
	group, err := udp.ListenShards(netip.AddrPortFrom(ip, 0), shards, &udp.Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range group {
			s.Close()
		}
	}()
	dst := group[0].LocalAddr()
	for _, s := range group[1:] {
		if s.LocalAddr() != dst {
			t.Fatalf("shard bound to %v, want %v", s.LocalAddr(), dst)
		}
	}
	if _, err := udp.Listen(dst, nil); err == nil {
		t.Fatal("Listen on a shard group's address succeeded")
	}
	if _, err := udp.ListenShards(dst, 2, nil); err == nil {
		t.Fatal("a second ListenShards joined the group")
	}
	if _, err := udp.ListenShards(netip.AddrPortFrom(ip, 0), 0, nil); !errors.Is(err, udp.ErrShards) {
		t.Fatalf("0 shards: %v, want ErrShards", err)
	}
	for f := range flows {
		tx := listen(t, netip.AddrPortFrom(ip, 0).String(), nil)
		msgs := make([]udp.Message, per)
		for i := range msgs {
			msgs[i] = udp.Message{Buf: make([]byte, 8), N: 8, Addr: dst}
			binary.BigEndian.PutUint32(msgs[i].Buf, uint32(f))
			binary.BigEndian.PutUint32(msgs[i].Buf[4:], uint32(i))
		}
		if _, err := tx.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
	}
	shardOf := map[netip.AddrPort]int{}
	next := map[netip.AddrPort]uint32{}
	used := map[int]bool{}
	got := 0
	rd := make([]udp.Message, 64)
	for i := range rd {
		rd[i].Buf = make([]byte, 64)
	}
	for si, s := range group {
		r := s.NewReader(len(rd))
		for {
			n, err := r.TryRead(rd)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			for _, m := range rd[:n] {
				if prev, ok := shardOf[m.Addr]; ok && prev != si {
					t.Fatalf("flow %v on shards %d and %d", m.Addr, prev, si)
				}
				shardOf[m.Addr] = si
				if seq := binary.BigEndian.Uint32(m.Buf[4:]); seq != next[m.Addr] {
					t.Fatalf("flow %v: datagram %d, want %d", m.Addr, seq, next[m.Addr])
				}
				next[m.Addr]++
				used[si] = true
				got++
			}
		}
	}
	if got != flows*per {
		t.Fatalf("received %d datagrams, want %d", got, flows*per)
	}
	if len(used) < 2 {
		t.Fatalf("%d flows all landed on one shard", flows)
	}
}
