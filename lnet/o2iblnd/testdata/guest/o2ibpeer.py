#!/usr/bin/python3
"""A minimal o2iblnd peer for the interop guest (Linux rdma_rxe + librdmacm).

Written for softib's guest interop test from the protocol facts in
lnet-wire.md (section 6): it accepts one o2iblnd connection on the RDMA CM
port, answers a fixed plan of LNet operations and validates every kib_msg
it receives. No Lustre code is involved; pyverbs (python3-pyverbs) drives
rdma_cm and the RC QP.

Plan: --ops is a comma-separated list of OP:SIZE:MATCHBITS, repeated
--rounds times, in the order the host issues them:
  put  the host PUTs SIZE bytes (IMMEDIATE when small, else PUT_REQ/RDMA);
       the payload must be pattern(SIZE, bits & 0xff); we send an LNet ACK
  get  the host GETs SIZE bytes: GET_REQ (we RDMA WRITE the pattern and send
       GET_DONE) or, when small, an IMMEDIATE GET answered by an IMMEDIATE
       REPLY
--burst COUNT:SIZE:BITS then expects COUNT small PUTs without an ACK
request, sent back to back (match bits BITS, BITS+1, ...): they exhaust the
host's send credits, which come back only in our NOOPs.
Output: one JSON line with everything checked; exit status 0 only when the
plan completed without a single violation.
"""

import argparse
import collections
import ipaddress
import json
import os
import struct
import sys
import time

from pyverbs import cm_enums as ce
from pyverbs import enums as e
from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.qp import QPCap, QPInitAttr

MAGIC = 0x0BE91B91
V2 = 0x12
HDR = 48
LNET_HDR = 72
MSG_SIZE = 4096
MAX_FRAGS = 257
CONNREQ, CONNACK = 0xC0, 0xC1
NOOP, IMMEDIATE, PUT_REQ, PUT_NAK, PUT_ACK, PUT_DONE, GET_REQ, GET_DONE = range(0xD0, 0xD8)
TYPE_NAMES = {CONNREQ: "CONNREQ", CONNACK: "CONNACK", NOOP: "NOOP", IMMEDIATE: "IMMEDIATE",
              PUT_REQ: "PUT_REQ", PUT_NAK: "PUT_NAK", PUT_ACK: "PUT_ACK", PUT_DONE: "PUT_DONE",
              GET_REQ: "GET_REQ", GET_DONE: "GET_DONE"}
# Smallest valid nob per type; IMMEDIATE and the RDMA-descriptor messages grow.
MIN_NOB = {NOOP: 48, IMMEDIATE: 120, PUT_REQ: 128, PUT_NAK: 60, PUT_ACK: 84,
           PUT_DONE: 60, GET_REQ: 148, GET_DONE: 60}
FIXED_NOB = {NOOP: 48, PUT_REQ: 128, PUT_NAK: 60, PUT_DONE: 60, GET_DONE: 60}
CREDIT_USERS = (IMMEDIATE, PUT_REQ, GET_REQ)
LNET_ACK, LNET_PUT, LNET_GET, LNET_REPLY = 0, 1, 2, 3
O2IBLND = 5
WC_RECV = 128


def nid(addr, net=0):
    return (O2IBLND << 48) | (net << 32) | int(ipaddress.IPv4Address(addr))


def nid_str(n):
    return "%s@o2ib%s" % (ipaddress.IPv4Address(n & 0xFFFFFFFF), (n >> 32) & 0xFFFF or "")


def pattern(n, seed):
    # byte i = i*7 + seed (mod 256): period 256, so build one period.
    block = bytes(((i * 7) + seed) & 0xFF for i in range(256))
    return block * (n // 256) + block[: n % 256]


def cksum(b):
    s = 0
    for x in b:
        s = ((s << 1) | (s >> 31)) & 0xFFFFFFFF
        s = (s + (x - 256 if x >= 128 else x)) & 0xFFFFFFFF
    return s or 1


class Violation(Exception):
    pass


class Peer:
    def __init__(self, a):
        self.a = a
        self.my_nid = nid(a.local)
        self.peer_nid = nid(a.peer)
        self.incarnation = int(time.time() * 1e6)
        self.violations = []
        self.rx = collections.Counter()
        self.tx = collections.Counter()
        self.checks = collections.Counter()
        self.plan = []
        for _ in range(a.rounds):
            for op in a.ops.split(","):
                kind, size, bits = op.split(":")
                self.plan.append((kind, int(size, 0), int(bits, 0)))
        if a.burst:
            count, size, bits = (int(x, 0) for x in a.burst.split(":"))
            self.plan += [("putnoack", size, bits + i) for i in range(count)]
        self.done_ops = 0
        self.rdma_verified = 0
        self.imm_verified = 0
        self.bytes_written = 0
        self.order = "<"
        self.peer_stamp = 0
        self.q = 0
        self.send_credits = 0  # ours towards the host
        self.peer_credits = 0  # the host's towards us, as we account them
        self.outstanding = 0  # credits we owe the host
        self.max_peer_credits_used = 0
        self.hiw = 0
        self.noops_rx = 0
        self.credits_rx = 0
        self.queued = collections.deque()  # credit-consuming sends waiting
        self.sq = collections.deque()  # posted send/write WRs in order
        self.rq = collections.deque()  # posted recv MRs in order
        self.free_tx = []
        self.cookie = 0x5EED0000
        self.pending_put = {}  # dst cookie -> (op, mr, src hdr)
        self.sinks = {}
        self.sources = {}

    def fail(self, msg):
        self.violations.append(msg)
        raise Violation(msg)

    def check(self, cond, what, msg):
        self.checks[what] += 1
        if not cond:
            self.fail(msg)

    # --- kib_msg codecs -------------------------------------------------

    def parse_hdr(self, b, nob_wc):
        self.check(len(b) >= HDR, "length", "message of %d bytes, shorter than the header" % len(b))
        magic = struct.unpack_from("<I", b, 0)[0]
        if magic == MAGIC:
            o = "<"
        elif magic == struct.unpack("<I", struct.pack(">I", MAGIC))[0]:
            o = ">"
            self.checks["byteswapped"] += 1
        else:
            self.fail("bad magic 0x%08x" % magic)
        ver, typ, credits, nob, ck, src, sstamp, dst, dstamp = struct.unpack_from(o + "HBBIIQQQQ", b, 4)
        self.check(ver == V2, "version", "version 0x%x, want 0x%x" % (ver, V2))
        self.check(nob == nob_wc, "nob", "nob %d but %d bytes arrived" % (nob, nob_wc))
        if ck:
            c = bytearray(b[:nob])
            c[12:16] = b"\0\0\0\0"
            self.check(cksum(c) == ck, "cksum", "checksum 0x%08x, computed 0x%08x" % (ck, cksum(c)))
        elif self.a.require_cksum:
            self.fail("%s without a checksum" % TYPE_NAMES.get(typ, hex(typ)))
        self.check(src == self.peer_nid, "srcnid", "srcnid %s, want %s" % (nid_str(src), nid_str(self.peer_nid)))
        self.check(dst == self.my_nid, "dstnid", "dstnid %s, want %s" % (nid_str(dst), nid_str(self.my_nid)))
        return o, typ, credits, nob, sstamp, dstamp

    def build(self, typ, body=b"", credits=0):
        nob = HDR + len(body)
        b = bytearray(struct.pack("<IHBBIIQQQQ", MAGIC, V2, typ, credits, nob, 0, self.my_nid,
                                  self.incarnation, self.peer_nid, self.peer_stamp))
        b += body
        if self.a.cksum:
            struct.pack_into("<I", b, 12, cksum(b))
        return bytes(b)

    # --- CM -------------------------------------------------------------

    def accept(self):
        a = self.a
        # Every pyverbs object stays referenced from self until os._exit:
        # their destructors (destroying an ID waits for its events to be
        # acked) would otherwise run on the error path and can block.
        self.keep = []
        ch = CMEventChannel()
        lid = CMID(ch)
        self.keep += [ch, lid]
        lid.bind_addr(AddrInfo(src=a.local, src_service=str(a.port), port_space=ce.RDMA_PS_TCP,
                               flags=ce.RAI_PASSIVE))
        lid.listen(1)
        if a.ready_file:
            open(a.ready_file, "w").close()
        ev = CMEvent(ch)
        self.keep.append(ev)
        if ev.event_type != ce.RDMA_CM_EVENT_CONNECT_REQUEST:
            self.fail("first CM event %s, want CONNECT_REQUEST" % ev.event_str())
        cid = CMID(ev, listen_id=lid)
        self.keep.append(cid)
        try:
            o, qd, frags, msz, sstamp = self.check_connreq(ev.private_data)
        except Violation:
            # A kib_rej with reason FATAL (3): the host does not retry.
            rej = struct.pack("<IHBBQHHI", MAGIC, V2, 3, 0, self.incarnation, a.qd, MAX_FRAGS, MSG_SIZE)
            try:
                cid.reject(rej)
            except Exception as x:
                self.violations.append("reject: %s" % x)
            raise
        pd = ev.private_data
        self.rx["CONNREQ"] += 1
        self.connreq = {"queue_depth": qd, "max_frags": frags, "max_msg_size": msz, "srcstamp": sstamp,
                        "cksum": struct.unpack_from(o + "I", pd, 12)[0] != 0,
                        "byteorder": "LE" if o == "<" else "BE"}
        self.peer_stamp, self.q = sstamp, qd
        self.send_credits = self.peer_credits = qd
        # peer_credits_hiw: Q/2 by default, at most Q-1.
        self.hiw = max(1, min(a.hiw or qd // 2, qd - 1))

        self.pd, ctx = lid.pd, lid.context
        nrx = 2 * qd + 2
        # Sends: messages plus one RDMA WRITE per fragment of a GET sink.
        nsq = 4 * qd + MAX_FRAGS + 16
        self.cq = CQ(ctx, nsq + nrx + 16)
        cap = QPCap(max_send_wr=nsq, max_recv_wr=nrx, max_send_sge=1, max_recv_sge=1)
        cid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.cid = cid
        for _ in range(nrx):
            self.post_rx(MR(self.pd, MSG_SIZE, e.IBV_ACCESS_LOCAL_WRITE))
        ack = self.build(CONNACK, struct.pack("<HHI", qd, MAX_FRAGS, MSG_SIZE))
        p = ConnParam(resources=0, depth=0, flow_control=1, retry=5, rnr_retry=6, data_len=len(ack))
        p.set_private_data(ack)
        cid.accept(p)
        self.tx["CONNACK"] += 1
        est = CMEvent(ch)
        self.keep.append(est)
        if est.event_type != ce.RDMA_CM_EVENT_ESTABLISHED:
            self.fail("CM event %s after accept, want ESTABLISHED" % est.event_str())

    def check_connreq(self, pd):
        """Validates the CONNREQ in the REQ private data."""
        self.check(len(pd) >= 56, "connreq_len", "REQ private data %d bytes, want 56" % len(pd))
        o, typ, credits, nob, sstamp, dstamp = self.parse_hdr(pd, 56)
        self.check(typ == CONNREQ, "connreq_type", "REQ private data type 0x%x, want CONNREQ" % typ)
        self.check(credits == 0, "connreq_credits", "CONNREQ credits %d" % credits)
        self.check(sstamp != 0, "connreq_srcstamp", "CONNREQ srcstamp 0")
        self.check(dstamp in (0, self.incarnation), "connreq_dststamp", "CONNREQ dststamp %d" % dstamp)
        qd, frags, msz = struct.unpack_from(o + "HHI", pd, 48)
        self.check(qd == self.a.qd, "queue_depth", "CONNREQ queue depth %d, want %d" % (qd, self.a.qd))
        self.check(frags == MAX_FRAGS, "max_frags", "CONNREQ max frags %d, want %d" % (frags, MAX_FRAGS))
        self.check(msz == MSG_SIZE, "max_msg_size", "CONNREQ max msg size %d, want %d" % (msz, MSG_SIZE))
        return o, qd, frags, msz, sstamp

    # --- verbs ----------------------------------------------------------

    def post_rx(self, mr):
        self.cid.post_recv(mr, MSG_SIZE)
        self.rq.append(mr)

    def txbuf(self):
        return self.free_tx.pop() if self.free_tx else MR(self.pd, MSG_SIZE, e.IBV_ACCESS_LOCAL_WRITE)

    def send(self, typ, body=b""):
        """Sends now (nocred types), or queues a credit-consuming one."""
        if typ in CREDIT_USERS:
            self.queued.append((typ, body))
            self.flush()
            return
        self.post_msg(typ, body)

    def flush(self):
        while self.queued and self.send_credits > 0:
            typ, body = self.queued.popleft()
            self.send_credits -= 1
            self.post_msg(typ, body)

    def post_msg(self, typ, body):
        credits, self.outstanding = self.outstanding, 0
        self.peer_credits += credits
        msg = self.build(typ, body, credits)
        mr = self.txbuf()
        mr.write(msg, len(msg))
        self.cid.post_send(mr, e.IBV_SEND_SIGNALED, len(msg))
        self.sq.append(("send", mr))
        self.tx[TYPE_NAMES[typ]] += 1

    def rdma_write(self, data, addr, rkey):
        # Source buffers are pooled by size and reused once their WRITE
        # has completed.
        pool = self.sources.setdefault(len(data), [])
        mr = pool.pop() if pool else MR(self.pd, len(data), e.IBV_ACCESS_LOCAL_WRITE)
        mr.write(data, len(data))
        self.cid.post_write(mr, len(data), addr, rkey, e.IBV_SEND_SIGNALED)
        self.sq.append(("write", mr))
        self.bytes_written += len(data)

    def poll(self):
        n, wcs = self.cq.poll(16)
        for wc in wcs[:n]:
            if wc.status != e.IBV_WC_SUCCESS:
                self.fail("work completion status %d opcode %d" % (wc.status, wc.opcode))
            if wc.opcode == WC_RECV:
                mr = self.rq.popleft()
                self.handle(mr, wc.byte_len)
            else:
                kind, mr = self.sq.popleft()
                if kind == "send":
                    self.free_tx.append(mr)
                else:
                    self.sources[mr.length].append(mr)
        return n

    # --- protocol -------------------------------------------------------

    def next_op(self, *kinds):
        kind = kinds[0]
        if self.done_ops >= len(self.plan):
            self.fail("unexpected %s beyond the plan of %d operations" % (kind, len(self.plan)))
        op = self.plan[self.done_ops]
        if op[0] not in kinds:
            self.fail("operation %d: host sent a %s, plan says %s" % (self.done_ops, kind, op[0]))
        return op

    def lnet_hdr(self, b, o):
        """Decodes the nid4 lnet_hdr at offset 48 (little-endian fields)."""
        dnid, snid, dpid, spid, typ, plen = struct.unpack_from("<QQIIII", b, HDR)
        self.check(dnid == self.my_nid, "lnet_dest_nid", "lnet dest_nid %s" % nid_str(dnid))
        self.check(snid == self.peer_nid, "lnet_src_nid", "lnet src_nid %s" % nid_str(snid))
        return {"dpid": dpid, "spid": spid, "type": typ, "plen": plen,
                "wmd": bytes(b[HDR + 32: HDR + 48])}

    def lnet_reply_hdr(self, h, typ, plen, wmd, rest=b""):
        body = struct.pack("<QQIIII", self.peer_nid, self.my_nid, h["spid"], h["dpid"], typ, plen) + wmd + rest
        return body + b"\0" * (LNET_HDR - len(body))

    def send_ack(self, h, bits, mlen):
        # ACK: dst_wmd = the PUT's ack_wmd, match_bits, mlength.
        self.send(IMMEDIATE, self.lnet_hdr_bytes_ack(h, bits, mlen))

    def lnet_hdr_bytes_ack(self, h, bits, mlen):
        return self.lnet_reply_hdr(h, LNET_ACK, 0, h["wmd"], struct.pack("<QI", bits, mlen))

    def check_put(self, b, h, size, bits, ack=True):
        mbits, _hdr_data, ptl, off = struct.unpack_from("<QQII", b, HDR + 48)
        self.check(h["type"] == LNET_PUT, "lnet_type", "lnet type %d, want PUT" % h["type"])
        self.check(h["plen"] == size, "lnet_len", "PUT payload_length %d, want %d" % (h["plen"], size))
        self.check(mbits == bits, "match_bits", "PUT match bits 0x%x, want 0x%x" % (mbits, bits))
        self.check(ptl == self.a.portal, "portal", "PUT portal %d, want %d" % (ptl, self.a.portal))
        self.check(off == 0, "offset", "PUT offset %d" % off)
        if ack:
            self.check(h["wmd"] != b"\xff" * 16, "ack_wmd", "PUT without an ACK request")
        else:
            self.check(h["wmd"] == b"\xff" * 16, "ack_wmd", "PUT with an unexpected ACK request")

    def check_get(self, b, h, size, bits):
        mbits, ptl, soff, slen = struct.unpack_from("<QIII", b, HDR + 48)
        self.check(h["type"] == LNET_GET, "lnet_type", "lnet type %d, want GET" % h["type"])
        self.check(h["plen"] == 0, "lnet_len", "GET payload_length %d" % h["plen"])
        self.check(mbits == bits, "match_bits", "GET match bits 0x%x, want 0x%x" % (mbits, bits))
        self.check(ptl == self.a.portal, "portal", "GET portal %d, want %d" % (ptl, self.a.portal))
        self.check(slen == size, "sink_length", "GET sink_length %d, want %d" % (slen, size))
        self.check(soff == 0, "offset", "GET src_offset %d" % soff)

    def handle(self, mr, nob_wc):
        b = mr.read(nob_wc, 0)
        o, typ, credits, nob, sstamp, dstamp = self.parse_hdr(b, nob_wc)
        name = TYPE_NAMES.get(typ)
        if name is None or typ in (CONNREQ, CONNACK):
            self.fail("unexpected message type 0x%x on the QP" % typ)
        self.rx[name] += 1
        self.check(sstamp == self.peer_stamp, "srcstamp", "%s srcstamp %d, want %d" % (name, sstamp, self.peer_stamp))
        self.check(dstamp == self.incarnation, "dststamp", "%s dststamp %d, want %d" % (name, dstamp, self.incarnation))
        self.check(nob >= MIN_NOB[typ], "nob", "%s of %d bytes, below %d" % (name, nob, MIN_NOB[typ]))
        if typ in FIXED_NOB:
            self.check(nob == FIXED_NOB[typ], "nob", "%s of %d bytes, want %d" % (name, nob, FIXED_NOB[typ]))
        # Credits the host returns to us; more than Q outstanding is EPROTO.
        self.check(self.send_credits + credits <= self.q, "credit_overflow",
                   "credit overflow: %d held + %d returned > %d" % (self.send_credits, credits, self.q))
        self.send_credits += credits
        self.credits_rx += credits
        if typ in CREDIT_USERS:
            self.peer_credits -= 1
            self.check(self.peer_credits >= 0, "peer_credits", "%s sent with no credit left" % name)
            self.max_peer_credits_used = max(self.max_peer_credits_used, self.q - self.peer_credits)
        # Buffers that carried IMMEDIATE/GET_REQ/PUT_DONE return a credit when
        # reposted; a PUT_REQ's credit comes back with its PUT_DONE.
        give = typ in (IMMEDIATE, GET_REQ, PUT_DONE)
        getattr(self, "on_" + name.lower())(b, o, nob)
        self.post_rx(mr)
        if give:
            self.outstanding += 1
        self.flush()
        self.maybe_noop()

    def maybe_noop(self):
        if self.outstanding >= self.hiw and (not self.queued or self.send_credits == 0):
            self.post_msg(NOOP, b"")

    def on_noop(self, b, o, nob):
        self.noops_rx += 1

    def on_immediate(self, b, o, nob):
        h = self.lnet_hdr(b, o)
        if h["type"] == LNET_PUT:
            kind, size, bits = self.next_op("put", "putnoack")
            self.check(size <= MSG_SIZE - 120, "imm_size", "PUT of %d bytes sent as IMMEDIATE" % size)
            self.check_put(b, h, size, bits, kind == "put")
            self.check(nob == 120 + size, "nob", "IMMEDIATE nob %d for a %d-byte PUT" % (nob, size))
            self.check(bytes(b[120:120 + size]) == pattern(size, bits & 0xFF), "payload",
                       "IMMEDIATE PUT payload differs (bits 0x%x)" % bits)
            self.imm_verified += size
            if kind == "put":
                self.send_ack(h, bits, size)
        elif h["type"] == LNET_GET:
            kind, size, bits = self.next_op("get")
            self.check(size <= MSG_SIZE - 120, "imm_size", "GET of %d bytes sent as IMMEDIATE" % size)
            self.check_get(b, h, size, bits)
            self.check(nob == 120, "nob", "IMMEDIATE GET nob %d" % nob)
            # REPLY: dst_wmd = the GET's return_wmd, then the data.
            self.send(IMMEDIATE, self.lnet_reply_hdr(h, LNET_REPLY, size, h["wmd"]) + pattern(size, bits & 0xFF))
        else:
            self.fail("IMMEDIATE carrying lnet type %d" % h["type"])
        self.done_ops += 1

    def on_put_req(self, b, o, nob):
        h = self.lnet_hdr(b, o)
        kind, size, bits = self.next_op("put")
        self.check(size > MSG_SIZE - 120, "rdma_size", "PUT of %d bytes sent as PUT_REQ" % size)
        self.check_put(b, h, size, bits)
        src_cookie = struct.unpack_from(o + "Q", b, 120)[0]
        sink = self.sinks.get(size)
        if sink is None:
            sink = self.sinks[size] = MR(self.pd, size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        sink.write(b"\0" * size, size)
        self.cookie += 1
        self.pending_put[self.cookie] = (size, bits, h, sink)
        rd = struct.pack("<IIIQ", sink.rkey, 1, size, sink.buf)
        self.send(PUT_ACK, struct.pack("<QQ", src_cookie, self.cookie) + rd)

    def on_put_done(self, b, o, nob):
        cookie, status = struct.unpack_from(o + "Qi", b, 48)
        if cookie not in self.pending_put:
            self.fail("PUT_DONE for unknown cookie 0x%x" % cookie)
        size, bits, h, sink = self.pending_put.pop(cookie)
        self.check(status == size, "put_status", "PUT_DONE status %d, want %d" % (status, size))
        self.check(sink.read(size, 0) == pattern(size, bits & 0xFF), "rdma_payload",
                   "RDMA-written PUT data differs (bits 0x%x)" % bits)
        self.rdma_verified += size
        self.send_ack(h, bits, size)
        self.done_ops += 1

    def on_get_req(self, b, o, nob):
        h = self.lnet_hdr(b, o)
        kind, size, bits = self.next_op("get")
        self.check(size > MSG_SIZE - 120, "rdma_size", "GET of %d bytes sent as GET_REQ" % size)
        self.check_get(b, h, size, bits)
        cookie = struct.unpack_from(o + "Q", b, 120)[0]
        key, nfrags = struct.unpack_from(o + "II", b, 128)
        self.check(1 <= nfrags <= MAX_FRAGS, "rd_nfrags", "GET_REQ with %d fragments" % nfrags)
        self.check(nob == 136 + 12 * nfrags, "nob", "GET_REQ nob %d for %d fragments" % (nob, nfrags))
        data = pattern(size, bits & 0xFF)
        off = 0
        for i in range(nfrags):
            fnob, addr = struct.unpack_from(o + "IQ", b, 136 + 12 * i)
            self.check(fnob > 0 and off + fnob <= size, "rd_frag", "GET_REQ fragment %d of %d bytes" % (i, fnob))
            self.rdma_write(data[off:off + fnob], addr, key)
            off += fnob
        self.check(off == size, "rd_total", "GET_REQ descriptor covers %d bytes, want %d" % (off, size))
        self.send(GET_DONE, struct.pack("<Qi", cookie, size))
        self.done_ops += 1

    def on_put_nak(self, b, o, nob):
        self.fail("PUT_NAK from the host")

    def on_put_ack(self, b, o, nob):
        self.fail("PUT_ACK from the host: we never send PUT_REQ")

    def on_get_done(self, b, o, nob):
        self.fail("GET_DONE from the host: we never send GET_REQ")

    # --- main loop ------------------------------------------------------

    def serve(self):
        deadline = time.monotonic() + self.a.deadline
        linger_until = None
        while True:
            now = time.monotonic()
            if now > deadline:
                self.fail("deadline: %d of %d operations done" % (self.done_ops, len(self.plan)))
            if self.done_ops == len(self.plan) and not self.sq and not self.queued:
                if linger_until is None:
                    linger_until = now + self.a.linger
                elif now > linger_until:
                    return
            if self.poll() == 0:
                time.sleep(0.0005)

    def summary(self, ok):
        return {"ok": ok, "nid": nid_str(self.my_nid), "peer": nid_str(self.peer_nid),
                "incarnation": self.incarnation, "connreq": getattr(self, "connreq", None),
                "ops": len(self.plan), "ops_done": self.done_ops,
                "rx": dict(self.rx), "tx": dict(self.tx), "checks": dict(self.checks),
                "imm_bytes_verified": self.imm_verified, "rdma_bytes_verified": self.rdma_verified,
                "rdma_bytes_written": self.bytes_written, "credits_returned_by_host": self.credits_rx,
                "noops_rx": self.noops_rx, "hiw": self.hiw, "max_host_credits_in_use": self.max_peer_credits_used,
                "violations": self.violations}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--local", default="192.168.77.2")
    ap.add_argument("--peer", default="192.168.77.1")
    ap.add_argument("--port", type=int, default=987)
    ap.add_argument("--qd", type=int, default=8, help="expected CONNREQ queue depth")
    ap.add_argument("--portal", type=int, default=51)
    ap.add_argument("--ops", default="put:500:0x101,put:1048576:0x102,get:1048576:0x103,get:500:0x104")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--burst", default="", help="COUNT:SIZE:BITS of back-to-back PUTs without ACK, after the rounds")
    ap.add_argument("--hiw", type=int, default=0, help="credits owed before a NOOP returns them (0: Q/2)")
    ap.add_argument("--cksum", action="store_true", help="checksum the messages we send")
    ap.add_argument("--require-cksum", action="store_true", help="every received message must carry a checksum")
    ap.add_argument("--deadline", type=float, default=120)
    ap.add_argument("--linger", type=float, default=1.0, help="seconds to keep validating after the plan")
    ap.add_argument("--ready-file", default="")
    a = ap.parse_args()
    p = Peer(a)
    ok = True
    try:
        p.accept()
        p.serve()
    except Violation:
        ok = False
    except Exception as x:  # pyverbs errors: report them as violations
        p.violations.append("%s: %s" % (type(x).__name__, x))
        ok = False
    ok = ok and not p.violations
    print(json.dumps(p.summary(ok), sort_keys=True), flush=True)
    if ok:
        try:
            p.cid.disconnect()
        except Exception:
            pass
    sys.stderr.flush()
    # Skip pyverbs' destructors: they would wait for unacked CM events.
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
