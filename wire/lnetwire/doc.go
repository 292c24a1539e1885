// Package lnetwire holds the pure codecs of Lustre LNet: NIDs and their
// string syntax, LND type numbers, process ids, the 72-byte little-endian
// lnet_hdr with its PUT/GET/ACK/REPLY/HELLO union, the lnet_ping_info
// buffer served on the reserved portal, and the acceptor request that
// opens socklnd connections.
//
// Everything here is stateless and imports only the standard library. The
// layouts follow lnet-wire.md sections 2–5 (lnet-idl.h, nidstrings.c,
// acceptor.c, api-ni.c in lustre-release). Decoders never panic on bad
// input: they return typed errors that match ErrShort, ErrBadNID,
// ErrBadType or ErrBadMagic with errors.Is.
//
// socklnd-specific frames (HELLO V2–V4, ksock_msg header) live in the
// sock*.go files of this package, owned by the socklnd work.
package lnetwire
