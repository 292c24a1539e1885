#!/usr/bin/env python3
# Guest side of rxe's memory-management interop test
# (memmgt_interop_test.go): a verbs agent on the guest kernel's rdma_rxe
# (pyverbs), driven by softib over a TCP control connection with one JSON
# object per line, request and reply. It owns one PD, CQ and registered
# buffer; QPs, memory windows and operations are made on request, and
# every reply carries the completion status the kernel gave.

import argparse
import json
import socket
import sys
import time

from pyverbs import enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

BUF = 1 << 16
REMOTE = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
          e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)


class Agent:
    def __init__(self, host_gid, gid_index, deadline):
        self.ctx = Context(name='rxe0')
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.mr = MR(self.pd, BUF, REMOTE | e.IBV_ACCESS_MW_BIND)
        self.host_gid = host_gid
        self.gid_index = gid_index
        self.deadline = deadline
        self.qps = {}
        self.mws = {}
        self.pending = []  # completions polled while waiting for another

    def qp(self, req):
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        attr = QPAttr()
        attr.qp_access_flags = REMOTE
        attr.port_num = 1
        attr.pkey_index = 0
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = req['qpn']
        attr.rq_psn = 0
        attr.sq_psn = 0
        attr.max_dest_rd_atomic = 4
        attr.max_rd_atomic = 4
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        gr = GlobalRoute(dgid=GID(self.host_gid), sgid_index=self.gid_index, hop_limit=64)
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        qp.to_rts(attr)
        self.qps[qp.qp_num] = qp
        return {'qpn': qp.qp_num, 'addr': self.mr.buf, 'rkey': self.mr.rkey, 'lkey': self.mr.lkey}

    def wait(self, wr_id):
        """The completion of wr_id (others seen meanwhile are kept)."""
        end = time.time() + 30
        while True:
            for i, wc in enumerate(self.pending):
                if wc['wr_id'] == wr_id:
                    return self.pending.pop(i)
            n, wcs = self.cq.poll(16)
            for wc in wcs[:n]:
                self.pending.append({'wr_id': wc.wr_id, 'status': wc.status, 'opcode': wc.opcode,
                                     'flags': wc.wc_flags, 'byte_len': wc.byte_len,
                                     'inv_rkey': wc.imm_data & 0xffffffff})
            if n == 0:
                if time.time() > end or time.time() > self.deadline:
                    return {'wr_id': wr_id, 'status': -1, 'error': 'no completion'}
                time.sleep(0.001)

    def post(self, qpn, wr, wr_id):
        self.qps[qpn].post_send(wr)
        return self.wait(wr_id)

    def rdma(self, req, opcode):
        sge = SGE(self.mr.buf + req['off'], req['len'], self.mr.lkey)
        wr = SendWR(wr_id=req['id'], opcode=opcode, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(req['rkey'], req['raddr'])
        return self.post(req['qpn'], wr, req['id'])

    def handle(self, req):
        op = req['op']
        if op == 'qp':
            return self.qp(req)
        if op == 'fill':
            self.mr.write(bytes((i * 7 + req['seed']) & 0xff for i in range(req['len'])), req['len'], req['off'])
            return {}
        if op == 'get':
            return {'hex': self.mr.read(req['len'], req['off']).hex()}
        if op == 'write':
            return self.rdma(req, e.IBV_WR_RDMA_WRITE)
        if op == 'read':
            return self.rdma(req, e.IBV_WR_RDMA_READ)
        if op == 'recv':
            sge = SGE(self.mr.buf + req['off'], req['len'], self.mr.lkey)
            self.qps[req['qpn']].post_recv(RecvWR(wr_id=req['id'], num_sge=1, sg=[sge]))
            return {}
        if op == 'wait':
            return self.wait(req['id'])
        if op in ('send_inv', 'local_inv'):
            opcode = e.IBV_WR_SEND_WITH_INV if op == 'send_inv' else e.IBV_WR_LOCAL_INV
            # invalidate_rkey shares its union with imm_data; pyverbs
            # stores imm_data as given.
            wr = SendWR(wr_id=req['id'], opcode=opcode, num_sge=0, imm_data=req['rkey'],
                        send_flags=e.IBV_SEND_SIGNALED)
            return self.post(req['qpn'], wr, req['id'])
        if op == 'alloc_mw':
            mw = MW(self.pd, e.IBV_MW_TYPE_1 if req['type'] == 1 else e.IBV_MW_TYPE_2)
            self.mws[req['name']] = mw
            return {'rkey': mw.rkey}
        if op == 'bind_mw':
            mw = self.mws[req['name']]
            access = 0
            for a in req['access']:
                access |= {'read': e.IBV_ACCESS_REMOTE_READ, 'write': e.IBV_ACCESS_REMOTE_WRITE,
                           'zero': e.IBV_ACCESS_ZERO_BASED}[a]
            info = MWBindInfo(self.mr, self.mr.buf + req['off'], req['len'], access)
            if req['type'] == 1:
                self.qps[req['qpn']].bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED))
                wc = self.wait(0)  # ibv_bind_mw posts with wr_id 0
                wc['rkey'] = mw.rkey
                wc['addr'] = self.mr.buf + req['off']
                return wc
            wr = SendWR(wr_id=req['id'], opcode=e.IBV_WR_BIND_MW, num_sge=0, send_flags=e.IBV_SEND_SIGNALED)
            wr.set_bind_wr(mw, info)
            rkey = wr.rkey
            wc = self.post(req['qpn'], wr, req['id'])
            wc['rkey'] = rkey
            wc['addr'] = self.mr.buf + req['off']
            return wc
        if op == 'quit':
            return {'bye': True}
        raise ValueError('unknown op ' + op)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--host', required=True, help='control address host:port')
    ap.add_argument('--host-gid', required=True, help="softib's GID, 8-word form")
    ap.add_argument('--gid-index', type=int, default=1)
    ap.add_argument('--deadline', type=int, default=200, help='seconds')
    a = ap.parse_args()
    agent = Agent(a.host_gid, a.gid_index, time.time() + a.deadline)
    h, p = a.host.rsplit(':', 1)
    s = socket.create_connection((h, int(p)), timeout=a.deadline)
    f = s.makefile('rw')
    for line in f:
        req = json.loads(line)
        try:
            rep = agent.handle(req)
        except Exception as ex:  # reported to softib, which fails the test
            rep = {'error': '%s: %s' % (type(ex).__name__, ex)}
        f.write(json.dumps(rep) + '\n')
        f.flush()
        if req['op'] == 'quit':
            break
    print('memmgt agent done')
    return 0


if __name__ == '__main__':
    sys.exit(main())
