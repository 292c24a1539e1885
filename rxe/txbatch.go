package rxe

import (
	"errors"
	"net"
	"net/netip"
	"sync"

	"softib/udp"
)

// txLane is one ordered stream of a QP's outgoing packets. A round builds
// packets into cur under the QP mutex; at its end the batch moves to out
// under mu and then goes to the socket with only mu held, so the socket
// call does not keep the poster or the receive goroutine off the engine.
// The two lanes (requests, responses) are independent PSN streams and
// need no order between them. Lock order: QP.mu, then txLane.mu.
type txLane struct {
	cur txBatch    // guarded by QP.mu
	mu  sync.Mutex // held from hand-off until the batch is sent
	out txBatch    // guarded by mu; empty whenever mu is free
}

// add queues p; a full batch goes out at once, still in order (QP.mu
// held).
func (l *txLane) add(q *QP, p *packet) {
	if l.cur.add(q, p) {
		l.mu.Lock()
		l.cur.flush(q)
		l.mu.Unlock()
	}
}

// take hands the round's batch over for sending (QP.mu held); if it
// returns true, the caller must call send.
func (l *txLane) take() bool {
	if len(l.cur.pkts) == 0 {
		return false
	}
	l.mu.Lock()
	l.cur, l.out = l.out, l.cur
	return true
}

// send sends the batch take handed over.
func (l *txLane) send(q *QP) {
	l.out.flush(q)
	l.mu.Unlock()
}

// txBatch collects outgoing packets for one WriteBatch.
type txBatch struct {
	pkts []*packet
	msgs []udp.Message
}

// add appends p and reports whether the batch is full.
func (t *txBatch) add(q *QP, p *packet) bool {
	if t.pkts == nil {
		n := max(q.dev.conn.BatchSize(), 1)
		t.pkts = make([]*packet, 0, n)
		t.msgs = make([]udp.Message, n)
	}
	t.pkts = append(t.pkts, p)
	return len(t.pkts) == cap(t.pkts)
}

// flush sends the batch.
func (t *txBatch) flush(q *QP) {
	if len(t.pkts) == 0 {
		return
	}
	q.dev.writeAll(q.txConn(), t.fill(t.msgs[:0]))
	t.release(q)
}

// fill appends the batch's datagrams to msgs.
func (t *txBatch) fill(msgs []udp.Message) []udp.Message {
	for _, p := range t.pkts {
		msgs = append(msgs, udp.Message{Buf: p.buf[:p.n], N: p.n, Addr: p.addr, TOS: p.cls.tos, TTL: p.cls.ttl})
	}
	return msgs
}

// release returns the sent packets to the pool.
func (t *txBatch) release(q *QP) {
	q.stats.SentPkts.Add(uint64(len(t.pkts)))
	for i, p := range t.pkts {
		q.dev.putPacket(p)
		t.pkts[i] = nil
	}
	clear(t.msgs[:len(t.pkts)]) // what flush filled, not the whole batch
	t.pkts = t.pkts[:0]
}

// writeAll sends msgs through c (the device socket or a QP's source
// port socket). Send errors lose the packets (the transport
// retransmits); they are counted.
func (d *Device) writeAll(c udp.Conn, msgs []udp.Message) {
	if d.capture != nil {
		d.capture.sent(netip.AddrPortFrom(d.addr, c.LocalAddr().Port()), msgs)
	}
	for sent := 0; sent < len(msgs); {
		n, err := c.WriteBatch(msgs[sent:])
		sent += n
		if err != nil {
			// Skip the datagram that failed; a closed socket loses all.
			d.stats.SendErr.Inc()
			sent++
			if errors.Is(err, net.ErrClosed) {
				d.stats.SendErr.Add(uint64(max(len(msgs)-sent, 0)))
				break
			}
		}
	}
	d.stats.SentPkts.Add(uint64(len(msgs)))
}
