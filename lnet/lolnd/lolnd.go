// Package lolnd is the loopback LND (0@lo): messages a node sends to one
// of its own NIDs are handed straight back to the core, with the payload
// copied from the sender's MD into the receiver's. Every lnet.Instance
// starts it, as Lustre does (lnet/lnet/lo.c).
package lolnd

import (
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// LND is the loopback driver type. Its zero value is ready to use.
type LND struct{}

// Type returns lnetwire.LOLND.
func (LND) Type() lnetwire.LNDType { return lnetwire.LOLND }

// DefaultTunables gives the loopback NI effectively unlimited credits:
// every send completes before Send returns.
func (LND) DefaultTunables() lnd.Tunables {
	return lnd.Tunables{Credits: 1 << 30, PeerCredits: 1 << 30, PeerBufferCredits: 1 << 30, PeerTimeout: -1}
}

// Startup sets the NI's NID to 0@lo.
func (LND) Startup(ni *lnd.NI) (lnd.Driver, error) {
	ni.NID = lnetwire.NIDLo0
	return &driver{ni: ni}, nil
}

type driver struct{ ni *lnd.NI }

// Send parses msg back into the core with msg itself as the receive
// context, then completes the send (lolnd_send).
func (d *driver) Send(msg *lnd.Msg) error {
	hdr := msg.Hdr
	if err := d.ni.Parse(&hdr, d.ni.NID, msg, false); err != nil {
		return err
	}
	d.ni.Finalize(msg, nil)
	return nil
}

// Recv copies the payload from the sending message (or from the copy made
// by EagerRecv) into dst (lolnd_recv).
func (d *driver) Recv(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	if msg == nil {
		return nil
	}
	switch src := private.(type) {
	case *lnd.Msg:
		lnd.CopyIOV(dst, src.Payload)
	case []byte:
		dst.CopyFrom(src)
	}
	d.ni.Finalize(msg, nil)
	return nil
}

// EagerRecv copies the payload aside when the core delays the message
// (lazy portal): the sending message completes right after Parse, so its
// buffer cannot be used later.
func (d *driver) EagerRecv(private any, msg *lnd.Msg) (any, error) {
	src, ok := private.(*lnd.Msg)
	if !ok {
		return private, nil
	}
	b := make([]byte, src.Payload.Len)
	src.Payload.CopyTo(b)
	return b, nil
}

// Shutdown has nothing to release: the loopback holds no messages.
func (d *driver) Shutdown() {}
