//go:build !linux

package socklnd

// Without splice(2) a forwarded payload is always copied through the
// router buffer (keep_linux.go explains the Linux path).

import (
	"io"
	"syscall"

	"softib/lnet/lnd"
)

type keptPayload struct{ l *LND }

type pipePool struct{}

type spliceIO struct{}

type moreIO struct{}

func (l *LND) putPipe(*keptPayload)                {}
func (l *LND) closeIdlePipesLocked()               {}
func (d *Driver) keepable() bool                   { return false }
func (d *Driver) takeKept(*lnd.Msg) *keptPayload   { return nil }
func (c *conn) spliceOut(*keptPayload, bool) error { return nil }
func (c *conn) writeMore([][]byte) error           { return nil }
func (c *conn) sendBufs([][]byte, bool) error      { return nil }
func (r *capReader) rawRead(p []byte) (int, error) { return r.r.Read(p) }
func rawConn(any) syscall.RawConn                  { return nil }

// KeepsFor reports false: payloads are never kept off the router buffer.
func (d *Driver) KeepsFor(lnd.Driver) bool { return false }

// RecvKept is Recv.
func (d *Driver) RecvKept(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	return d.recv(private, msg, dst, rlen, false)
}

// Materialize does nothing: no payload is kept.
func (d *Driver) Materialize(*lnd.Msg, lnd.IOV) error { return nil }

// ReleaseKept does nothing: no payload is kept.
func (d *Driver) ReleaseKept(*lnd.Msg) {}

func (c *conn) readKept(dst lnd.IOV, rlen int) (*keptPayload, error) {
	return nil, c.readInto(dst, rlen)
}

func (c *conn) readInto(dst lnd.IOV, n int) error {
	c.rxIov = dst.Slice(0, n).AppendBuffers(c.rxIov[:0])
	defer clear(c.rxIov)
	for _, b := range c.rxIov {
		if _, err := io.ReadFull(c.br, b); err != nil {
			return err
		}
	}
	return nil
}
