// C helpers of the ibverbs provider (cgo; included by the package's Go
// files, so every function is static inline).
#ifndef SOFTIB_IBVERBS_SIB_H
#define SOFTIB_IBVERBS_SIB_H
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>

// Flat work requests that Go fills in C memory; the C side turns a batch
// into the ibv_*_wr lists libibverbs wants (unions and linked lists are
// awkward from Go) and posts it in one call.
typedef struct {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uintptr_t ah;
	uint32_t rkey;
	uint32_t imm_or_inv;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t num_sge;
	uint32_t sge_off;
	uint32_t opcode;
	uint32_t flags;
	// BIND_MW: the window, the MR and the range.
	uintptr_t mw;
	uintptr_t bind_mr;
	uint64_t bind_addr;
	uint64_t bind_len;
	uint32_t bind_access;
} sib_swr;

typedef struct {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t sge_off;
} sib_rwr;

typedef struct {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_or_inv;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
} sib_wc;

static inline int sib_post_send(struct ibv_qp *qp, sib_swr *w, int n, struct ibv_sge *sges,
		struct ibv_send_wr *wrs, int *bad) {
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *d = &wrs[i];
		memset(d, 0, sizeof(*d));
		d->wr_id = w[i].wr_id;
		d->next = i + 1 < n ? &wrs[i + 1] : NULL;
		d->sg_list = w[i].num_sge ? &sges[w[i].sge_off] : NULL;
		d->num_sge = (int)w[i].num_sge;
		d->opcode = (enum ibv_wr_opcode)w[i].opcode;
		d->send_flags = w[i].flags;
		if (w[i].opcode == IBV_WR_LOCAL_INV || w[i].opcode == IBV_WR_SEND_WITH_INV)
			d->invalidate_rkey = w[i].imm_or_inv;
		else
			d->imm_data = w[i].imm_or_inv;
		switch (w[i].opcode) {
		case IBV_WR_BIND_MW:
			d->bind_mw.mw = (struct ibv_mw *)w[i].mw;
			d->bind_mw.rkey = w[i].rkey;
			d->bind_mw.bind_info.mr = (struct ibv_mr *)w[i].bind_mr;
			d->bind_mw.bind_info.addr = w[i].bind_addr;
			d->bind_mw.bind_info.length = w[i].bind_len;
			d->bind_mw.bind_info.mw_access_flags = w[i].bind_access;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			d->wr.atomic.remote_addr = w[i].remote_addr;
			d->wr.atomic.compare_add = w[i].compare_add;
			d->wr.atomic.swap = w[i].swap;
			d->wr.atomic.rkey = w[i].rkey;
			break;
		default:
			if (qp->qp_type == IBV_QPT_UD) {
				d->wr.ud.ah = (struct ibv_ah *)w[i].ah;
				d->wr.ud.remote_qpn = w[i].remote_qpn;
				d->wr.ud.remote_qkey = w[i].remote_qkey;
			} else {
				d->wr.rdma.remote_addr = w[i].remote_addr;
				d->wr.rdma.rkey = w[i].rkey;
			}
		}
	}
	struct ibv_send_wr *badwr = NULL;
	int rc = ibv_post_send(qp, wrs, &badwr);
	*bad = badwr ? (int)(badwr - wrs) : n;
	return rc;
}

static inline int sib_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, sib_rwr *w, int n,
		struct ibv_sge *sges, struct ibv_recv_wr *wrs, int *bad) {
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *d = &wrs[i];
		d->wr_id = w[i].wr_id;
		d->next = i + 1 < n ? &wrs[i + 1] : NULL;
		d->sg_list = w[i].num_sge ? &sges[w[i].sge_off] : NULL;
		d->num_sge = (int)w[i].num_sge;
	}
	struct ibv_recv_wr *badwr = NULL;
	int rc = srq ? ibv_post_srq_recv(srq, wrs, &badwr) : ibv_post_recv(qp, wrs, &badwr);
	*bad = badwr ? (int)(badwr - wrs) : n;
	return rc;
}

static inline int sib_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *tmp, sib_wc *out) {
	int got = ibv_poll_cq(cq, n, tmp);
	for (int i = 0; i < got; i++) {
		struct ibv_wc *s = &tmp[i];
		sib_wc *d = &out[i];
		d->wr_id = s->wr_id;
		d->status = s->status;
		d->opcode = s->opcode;
		d->vendor_err = s->vendor_err;
		d->byte_len = s->byte_len;
		d->imm_or_inv = (s->wc_flags & IBV_WC_WITH_INV) ? s->invalidated_rkey : be32toh(s->imm_data);
		d->qp_num = s->qp_num;
		d->src_qp = s->src_qp;
		d->wc_flags = s->wc_flags;
		d->pkey_index = s->pkey_index;
		d->slid = s->slid;
		d->sl = s->sl;
		d->dlid_path_bits = s->dlid_path_bits;
	}
	return got;
}

// sib_bind_mw binds a type 1 window (ibv_bind_mw); it returns an errno.
static inline int sib_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id, unsigned int flags,
		struct ibv_mr *mr, uint64_t addr, uint64_t len, unsigned int access) {
	struct ibv_mw_bind b;
	memset(&b, 0, sizeof(b));
	b.wr_id = wr_id;
	b.send_flags = flags;
	b.bind_info.mr = mr;
	b.bind_info.addr = addr;
	b.bind_info.length = len;
	b.bind_info.mw_access_flags = access;
	return ibv_bind_mw(qp, mw, &b);
}

static inline int sib_req_notify(struct ibv_cq *cq, int solicited) { return ibv_req_notify_cq(cq, solicited); }

static inline int sib_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

static inline int sib_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t idx, struct ibv_gid_entry *e) {
	return ibv_query_gid_ex(c, port, idx, e, 0);
}

static inline int sib_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return errno;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? errno : 0;
}

// sib_get_cq_event returns the CQ of the next completion event, or NULL
// when none is pending (the channel's fd is non-blocking).
static inline struct ibv_cq *sib_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq = NULL;
	void *ctx = NULL;
	if (ibv_get_cq_event(ch, &cq, &ctx)) return NULL;
	ibv_ack_cq_events(cq, 1);
	return cq;
}

typedef struct {
	uint32_t type;
	uint32_t qp_num;
	uintptr_t cq;
	uintptr_t srq;
	uint32_t port;
} sib_async;

static inline int sib_get_async(struct ibv_context *c, sib_async *out) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(c, &ev)) return errno;
	out->type = ev.event_type;
	out->qp_num = 0; out->cq = 0; out->srq = 0; out->port = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		out->cq = (uintptr_t)ev.element.cq; break;
	case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED:
		out->srq = (uintptr_t)ev.element.srq; break;
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE: case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = ev.element.port_num; break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		if (ev.element.qp) out->qp_num = ev.element.qp->qp_num;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

static inline void sib_set_gid(union ibv_gid *g, const uint8_t *raw) { memcpy(g->raw, raw, 16); }
static inline void sib_get_gid(const union ibv_gid *g, uint8_t *raw) { memcpy(raw, g->raw, 16); }
static inline uint64_t sib_be64(__be64 v) { return be64toh(v); }
#endif
