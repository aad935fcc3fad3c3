//go:build cgo && linux

package rdmacore

// This is the only file of the package that imports "C". It holds thin,
// lowercase, one-to-one wrappers of the libibverbs and librdmacm calls the
// provider uses, plus the copies between C structs and the verbs Go types.
// rdma-core is not needed to build it: the structs come from
// rdmacore_abi.h, and each C function below calls through a table of entry
// points that load.go fills from the libraries at run time.
// No C type leaves this file: C objects travel through the rest of the
// package as the opaque pointer types below, and every decision (validation,
// locking, bookkeeping, waiting) is made in Go elsewhere.

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE // dlvsym
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <dlfcn.h>
#include <endian.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "rdmacore_abi.h"

// rc_ep holds the entry points of libibverbs and librdmacm, set once by
// load.go (dlvsym of each name at the symbol version it has had since the
// ABI this package is written against) before any of them is called.
struct rc_entry_points {
	struct ibv_device **(*ibv_get_device_list)(int *num_devices);
	void (*ibv_free_device_list)(struct ibv_device **list);
	const char *(*ibv_get_device_name)(struct ibv_device *device);
	uint64_t (*ibv_get_device_guid)(struct ibv_device *device);
	int (*ibv_query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
	int (*ibv_query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
	int (*ibv_query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
	struct ibv_pd *(*ibv_alloc_pd)(struct ibv_context *context);
	int (*ibv_dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
	int (*ibv_dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*ibv_create_comp_channel)(struct ibv_context *context);
	int (*ibv_destroy_comp_channel)(struct ibv_comp_channel *channel);
	int (*ibv_get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
	void (*ibv_ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
	struct ibv_cq *(*ibv_create_cq)(struct ibv_context *context, int cqe, void *cq_context,
		struct ibv_comp_channel *channel, int comp_vector);
	int (*ibv_destroy_cq)(struct ibv_cq *cq);
	int (*ibv_get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
	void (*ibv_ack_async_event)(struct ibv_async_event *event);
	struct ibv_qp *(*ibv_create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*ibv_destroy_qp)(struct ibv_qp *qp);
	int (*ibv_modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*ibv_query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);

	struct ibv_context **(*rdma_get_devices)(int *num_devices);
	void (*rdma_free_devices)(struct ibv_context **list);
	struct rdma_event_channel *(*rdma_create_event_channel)(void);
	void (*rdma_destroy_event_channel)(struct rdma_event_channel *channel);
	int (*rdma_get_cm_event)(struct rdma_event_channel *channel, struct rdma_cm_event **event);
	int (*rdma_ack_cm_event)(struct rdma_cm_event *event);
	int (*rdma_create_id)(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context, int ps);
	int (*rdma_destroy_id)(struct rdma_cm_id *id);
	int (*rdma_bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
	int (*rdma_listen)(struct rdma_cm_id *id, int backlog);
	int (*rdma_resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms);
	int (*rdma_resolve_route)(struct rdma_cm_id *id, int timeout_ms);
	int (*rdma_connect)(struct rdma_cm_id *id, struct rdma_conn_param *param);
	int (*rdma_accept)(struct rdma_cm_id *id, struct rdma_conn_param *param);
	int (*rdma_reject)(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len);
	int (*rdma_disconnect)(struct rdma_cm_id *id);
	int (*rdma_migrate_id)(struct rdma_cm_id *id, struct rdma_event_channel *channel);
	int (*rdma_set_option)(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen);
	int (*rdma_create_qp)(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*rdma_init_qp_attr)(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask);
	// Optional: NULL where libibverbs predates it (rdma-core 34).
	struct ibv_mr *(*ibv_reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
		int fd, int access);
};

struct rc_entry_points rc_ep;

// One trampoline per entry point, named after it, so that the calls below
// read as calls of rdma-core's API.
static struct ibv_device **ibv_get_device_list(int *n) { return rc_ep.ibv_get_device_list(n); }
static void ibv_free_device_list(struct ibv_device **l) { rc_ep.ibv_free_device_list(l); }
static const char *ibv_get_device_name(struct ibv_device *d) { return rc_ep.ibv_get_device_name(d); }
static uint64_t ibv_get_device_guid(struct ibv_device *d) { return rc_ep.ibv_get_device_guid(d); }
static int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) { return rc_ep.ibv_query_device(c, a); }
static int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
	return rc_ep.ibv_query_gid(c, port, index, gid);
}
static struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) { return rc_ep.ibv_alloc_pd(c); }
static int ibv_dealloc_pd(struct ibv_pd *pd) { return rc_ep.ibv_dealloc_pd(pd); }
static struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t n, int access) {
	return rc_ep.ibv_reg_mr(pd, addr, n, access);
}
static int ibv_dereg_mr(struct ibv_mr *mr) { return rc_ep.ibv_dereg_mr(mr); }
// ibv_alloc_mw and ibv_dealloc_mw are inline in verbs.h, through the ops
// table, as here.
static struct ibv_mw *rc_alloc_mw(struct ibv_pd *pd) {
	if (!pd->context->ops.alloc_mw) { errno = EOPNOTSUPP; return NULL; }
	return pd->context->ops.alloc_mw(pd, IBV_MW_TYPE_2);
}
static int rc_dealloc_mw(struct ibv_mw *mw) { return mw->context->ops.dealloc_mw(mw); }
enum { rc_bind_mw_off = offsetof(struct ibv_send_wr, bind_mw), rc_bind_info_off = offsetof(struct ibv_send_wr, bind_mw.bind_info) - offsetof(struct ibv_send_wr, bind_mw) };
static struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t n, uint64_t iova, int fd, int access) {
	return rc_ep.ibv_reg_dmabuf_mr(pd, off, n, iova, fd, access);
}
static struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) { return rc_ep.ibv_create_comp_channel(c); }
static int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) { return rc_ep.ibv_destroy_comp_channel(ch); }
static int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx) {
	return rc_ep.ibv_get_cq_event(ch, cq, ctx);
}
static void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { rc_ep.ibv_ack_cq_events(cq, n); }
static struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx, struct ibv_comp_channel *ch, int vec) {
	return rc_ep.ibv_create_cq(c, cqe, ctx, ch, vec);
}
static int ibv_destroy_cq(struct ibv_cq *cq) { return rc_ep.ibv_destroy_cq(cq); }
static int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev) { return rc_ep.ibv_get_async_event(c, ev); }
static void ibv_ack_async_event(struct ibv_async_event *ev) { rc_ep.ibv_ack_async_event(ev); }
static struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) { return rc_ep.ibv_create_qp(pd, a); }
static int ibv_destroy_qp(struct ibv_qp *qp) { return rc_ep.ibv_destroy_qp(qp); }
static int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) { return rc_ep.ibv_modify_qp(qp, a, mask); }
static int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init) {
	return rc_ep.ibv_query_qp(qp, a, mask, init);
}

static struct ibv_context **rdma_get_devices(int *n) { return rc_ep.rdma_get_devices(n); }
static void rdma_free_devices(struct ibv_context **l) { rc_ep.rdma_free_devices(l); }
static struct rdma_event_channel *rdma_create_event_channel(void) { return rc_ep.rdma_create_event_channel(); }
static void rdma_destroy_event_channel(struct rdma_event_channel *ch) { rc_ep.rdma_destroy_event_channel(ch); }
static int rdma_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev) { return rc_ep.rdma_get_cm_event(ch, ev); }
static int rdma_ack_cm_event(struct rdma_cm_event *ev) { return rc_ep.rdma_ack_cm_event(ev); }
static int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *ctx, int ps) {
	return rc_ep.rdma_create_id(ch, id, ctx, ps);
}
static int rdma_destroy_id(struct rdma_cm_id *id) { return rc_ep.rdma_destroy_id(id); }
static int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *a) { return rc_ep.rdma_bind_addr(id, a); }
static int rdma_listen(struct rdma_cm_id *id, int backlog) { return rc_ep.rdma_listen(id, backlog); }
static int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int ms) {
	return rc_ep.rdma_resolve_addr(id, src, dst, ms);
}
static int rdma_resolve_route(struct rdma_cm_id *id, int ms) { return rc_ep.rdma_resolve_route(id, ms); }
static int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p) { return rc_ep.rdma_connect(id, p); }
static int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p) { return rc_ep.rdma_accept(id, p); }
static int rdma_reject(struct rdma_cm_id *id, const void *pd, uint8_t n) { return rc_ep.rdma_reject(id, pd, n); }
static int rdma_disconnect(struct rdma_cm_id *id) { return rc_ep.rdma_disconnect(id); }
static int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch) { return rc_ep.rdma_migrate_id(id, ch); }
static int rdma_set_ack_timeout(struct rdma_cm_id *id, uint8_t timeout) {
	return rc_ep.rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout);
}
static int rdma_set_tos(struct rdma_cm_id *id, uint8_t tos) {
	return rc_ep.rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos);
}
static int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
	return rc_ep.rdma_create_qp(id, pd, a);
}
static int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *a, int *mask) {
	return rc_ep.rdma_init_qp_attr(id, a, mask);
}

// The verbs that verbs.h and rdma_cma.h define inline: the data path calls
// the device's provider library through the ops table of the object's
// context, and a CM ID's addresses live in the ID.
static int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	return qp->context->ops.post_send(qp, wr, bad);
}
static int ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	return qp->context->ops.post_recv(qp, wr, bad);
}
static int ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return cq->context->ops.poll_cq(cq, n, wc); }
static int ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	return cq->context->ops.req_notify_cq(cq, solicited_only);
}
static struct sockaddr *rdma_get_local_addr(struct rdma_cm_id *id) { return (struct sockaddr *)&id->route.addr.src_storage; }
static struct sockaddr *rdma_get_peer_addr(struct rdma_cm_id *id) { return (struct sockaddr *)&id->route.addr.dst_storage; }

// rc_dlopen and rc_dlvsym copy dlerror's text into err on failure: it is
// per thread, so it must be read within the same C call.
static void *rc_dlopen(const char *name, char *err, size_t errlen) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) snprintf(err, errlen, "%s", dlerror());
	return h;
}

static void *rc_dlvsym(void *h, const char *name, const char *version, char *err, size_t errlen) {
	dlerror();
	void *p = dlvsym(h, name, version);
	if (p == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "null symbol");
	}
	return p;
}

// ibv_query_port: the exported function fills the fields up to flags (the
// layout libibverbs 1.1 had); the rest is left zero, as verbs.h's inline
// wrapper does.
static int rc_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	memset(attr, 0, sizeof(*attr));
	return rc_ep.ibv_query_port(ctx, port, attr);
}

static void rc_fill_sockaddr(struct sockaddr_storage *ss, int v6, const uint8_t *ip, uint16_t port, uint32_t scope) {
	memset(ss, 0, sizeof(*ss));
	if (v6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
		s->sin6_scope_id = scope;
	} else {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
	}
}

// rc_read_sockaddr copies an address out; it returns the family (0 if none).
static int rc_read_sockaddr(const struct sockaddr *sa, uint8_t *ip16, uint16_t *port, uint32_t *scope) {
	if (sa == NULL) return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		memcpy(ip16, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(ip16, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		*scope = s->sin6_scope_id;
		return AF_INET6;
	}
	return sa->sa_family;
}

// Out-parameters of the waiting calls live in C memory owned by the channel,
// so that no Go pointer is handed to C and nothing is allocated per event.
struct rc_cq_event {
	struct ibv_cq *cq;
	void *cq_context;
};

struct rc_cm_event {
	struct rdma_cm_event *ev;
};

// The per-QP scratch for posting: WR and SGE arrays in C memory, filled from
// the Go work requests, and the index of the WR a failed post refused. One
// type serves both queues: wr holds ibv_send_wr or ibv_recv_wr structs,
// which only the post calls and the Go side's setSendWR and setRecvWR read.
struct rc_scratch {
	void *wr;
	struct ibv_sge *sge;
	int nwr, nsge;
	int bad; // the refused WR after a failed post, -1 if the provider did not say
};

// rc_alloc_scratch allocates nwr WRs of wrsize bytes and nsge SGEs for each
// (one at least, so that the array is never empty).
static struct rc_scratch *rc_alloc_scratch(int nwr, size_t wrsize, int nsge) {
	struct rc_scratch *s = calloc(1, sizeof(*s));
	if (!s) return NULL;
	s->wr = calloc(nwr, wrsize);
	s->sge = calloc((size_t)nwr * (nsge ? nsge : 1), sizeof(*s->sge));
	if (!s->wr || !s->sge) { free(s->wr); free(s->sge); free(s); return NULL; }
	s->nwr = nwr; s->nsge = nsge;
	return s;
}

static struct rc_scratch *rc_alloc_send_scratch(int nwr, int nsge) {
	return rc_alloc_scratch(nwr, sizeof(struct ibv_send_wr), nsge);
}

static struct rc_scratch *rc_alloc_recv_scratch(int nwr, int nsge) {
	return rc_alloc_scratch(nwr, sizeof(struct ibv_recv_wr), nsge);
}

static void rc_free_scratch(struct rc_scratch *s) {
	if (!s) return;
	free(s->wr); free(s->sge); free(s);
}

// The calls on the data path take their pointers as integers: they point
// at C memory only, and cgo checks every pointer-typed argument for Go
// pointers on every call (cgoCheckPointer: ~10% of a busy-polling
// connection's cycles in the Soft-RoCE guest).
static int rc_post_send(uintptr_t qp, uintptr_t scratch) {
	struct rc_scratch *s = (struct rc_scratch *)scratch;
	struct ibv_send_wr *wr = s->wr, *bad = NULL;
	int r = ibv_post_send((struct ibv_qp *)qp, wr, &bad);
	s->bad = bad ? (int)(bad - wr) : -1;
	return r;
}

static int rc_post_recv(uintptr_t qp, uintptr_t scratch) {
	struct rc_scratch *s = (struct rc_scratch *)scratch;
	struct ibv_recv_wr *wr = s->wr, *bad = NULL;
	int r = ibv_post_recv((struct ibv_qp *)qp, wr, &bad);
	s->bad = bad ? (int)(bad - wr) : -1;
	return r;
}

static int rc_poll_cq(uintptr_t cq, int n, uintptr_t wc) {
	return ibv_poll_cq((struct ibv_cq *)cq, n, (struct ibv_wc *)wc);
}

static uint64_t rc_be64(uint64_t x) { return be64toh(x); }

static uint64_t rc_device_guid(struct ibv_context *ctx) {
	return be64toh(ibv_get_device_guid(ctx->device));
}

static void rc_init_qp_attr(struct ibv_qp_init_attr *a, struct ibv_cq *scq, struct ibv_cq *rcq,
		uint32_t swr, uint32_t rwr, uint32_t ssge, uint32_t rsge, uint32_t inl, int sigall) {
	memset(a, 0, sizeof(*a));
	a->send_cq = scq;
	a->recv_cq = rcq;
	a->qp_type = IBV_QPT_RC;
	a->sq_sig_all = sigall;
	a->cap.max_send_wr = swr;
	a->cap.max_recv_wr = rwr;
	a->cap.max_send_sge = ssge;
	a->cap.max_recv_sge = rsge;
	a->cap.max_inline_data = inl;
}

// rc_connect and rc_accept build the rdma_conn_param on the C stack: its
// private_data points at Go memory passed as an argument, which C may hold
// only for the duration of the call.
static void rc_conn_param(struct rdma_conn_param *p, const void *pd, int pdlen, int rr, int id, int rc, int rnr) {
	memset(p, 0, sizeof(*p));
	p->private_data = pdlen ? pd : NULL;
	p->private_data_len = pdlen;
	p->responder_resources = rr;
	p->initiator_depth = id;
	p->flow_control = 1;
	p->retry_count = rc;
	p->rnr_retry_count = rnr;
}

static int rc_connect(struct rdma_cm_id *cid, const void *pd, int pdlen, int rr, int id, int rc, int rnr) {
	struct rdma_conn_param p;
	rc_conn_param(&p, pd, pdlen, rr, id, rc, rnr);
	return rdma_connect(cid, &p);
}

static int rc_accept(struct rdma_cm_id *cid, const void *pd, int pdlen, int rr, int id, int rc, int rnr) {
	struct rdma_conn_param p;
	rc_conn_param(&p, pd, pdlen, rr, id, rc, rnr);
	return rdma_accept(cid, &p);
}

// rc_destroy_qp is rdma_destroy_qp that reports failure: librdmacm's
// returns nothing and forgets the QP even when the kernel kept it.
static int rc_destroy_qp(struct rdma_cm_id *id) {
	int r = ibv_destroy_qp(id->qp);
	if (r == 0) id->qp = NULL;
	return r;
}

// rc_modify_qp_init moves a CM ID's QP to INIT with the attributes the CM
// chooses (port, P_Key index, access flags), which RESET->INIT requires.
static int rc_modify_qp_init(struct rdma_cm_id *id, struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	int mask = 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &a, &mask)) return errno ? errno : EINVAL;
	return ibv_modify_qp(qp, &a, mask);
}

static int rc_async_fd(struct ibv_context *ctx) { return ctx->async_fd; }

// rc_get_async_event returns the CQ of an IBV_EVENT_CQ_ERR (NULL for any
// other event) in *cq; the event stays in *ev until acknowledged.
static int rc_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev, struct ibv_cq **cq) {
	int r = ibv_get_async_event(ctx, ev);
	if (r == 0) *cq = ev->event_type == IBV_EVENT_CQ_ERR ? ev->element.cq : NULL;
	return r;
}

struct rc_async_event {
	struct ibv_async_event ev;
	struct ibv_cq *cq;
};

static struct ibv_context *rc_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
static struct ibv_qp *rc_id_qp(struct rdma_cm_id *id) { return id->qp; }
static int rc_channel_fd(struct rdma_event_channel *ch) { return ch->fd; }
static int rc_comp_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"unsafe"

	"github.com/rdmanet/rdma/verbs"
)

// Opaque handles of C objects; only this file converts them back.
type (
	ctxPtr      unsafe.Pointer // struct ibv_context *
	devListPtr  unsafe.Pointer // struct ibv_context ** from rdma_get_devices
	pdPtr       unsafe.Pointer // struct ibv_pd *
	mrPtr       unsafe.Pointer // struct ibv_mr *
	mwPtr       unsafe.Pointer // struct ibv_mw *
	compChPtr   unsafe.Pointer // struct ibv_comp_channel *
	cqPtr       unsafe.Pointer // struct ibv_cq *
	qpPtr       unsafe.Pointer // struct ibv_qp *
	ecPtr       unsafe.Pointer // struct rdma_event_channel *
	idPtr       unsafe.Pointer // struct rdma_cm_id *
	cmEventPtr  unsafe.Pointer // struct rdma_cm_event *
	cqEvOutPtr  unsafe.Pointer // struct rc_cq_event *
	cmEvOutPtr  unsafe.Pointer // struct rc_cm_event *
	wcArrayPtr  unsafe.Pointer // struct ibv_wc[n]
	asyncOutPtr unsafe.Pointer // struct rc_async_event *
	sendScratch unsafe.Pointer // struct rc_scratch * of ibv_send_wr
	recvScratch unsafe.Pointer // struct rc_scratch * of ibv_recv_wr
)

// --- loading the libraries ---

// dlopen opens a library by file name (RTLD_NOW | RTLD_LOCAL); the error is
// dlerror's text.
func dlopen(name string) (unsafe.Pointer, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg [512]C.char
	h := C.rc_dlopen(cname, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return nil, errors.New(C.GoString(&msg[0]))
	}
	return h, nil
}

// dlvsym looks up name at the given symbol version in the library h.
func dlvsym(h unsafe.Pointer, name, version string) (unsafe.Pointer, error) {
	cname, cversion := C.CString(name), C.CString(version)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cversion))
	var msg [512]C.char
	p := C.rc_dlvsym(h, cname, cversion, &msg[0], C.size_t(len(msg)))
	if p == nil {
		return nil, errors.New(C.GoString(&msg[0]))
	}
	return p, nil
}

// entryPoints lists every function the package calls in the two libraries,
// with the symbol version it is looked up at and its slot in rc_ep.
func entryPoints() []entryPoint {
	ep := &C.rc_ep
	ibv := func(name, version string, slot unsafe.Pointer) entryPoint {
		return entryPoint{lib: libIBVerbs, name: name, version: version, slot: (*unsafe.Pointer)(slot)}
	}
	optional := func(e entryPoint) entryPoint {
		e.optional = true
		return e
	}
	cm := func(name, version string, slot unsafe.Pointer) entryPoint {
		return entryPoint{lib: libRDMACM, name: name, version: version, slot: (*unsafe.Pointer)(slot)}
	}
	return []entryPoint{
		ibv("ibv_get_device_list", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_get_device_list)),
		ibv("ibv_free_device_list", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_free_device_list)),
		ibv("ibv_get_device_name", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_get_device_name)),
		ibv("ibv_get_device_guid", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_get_device_guid)),
		ibv("ibv_query_device", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_query_device)),
		ibv("ibv_query_port", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_query_port)),
		ibv("ibv_query_gid", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_query_gid)),
		ibv("ibv_alloc_pd", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_alloc_pd)),
		ibv("ibv_dealloc_pd", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_dealloc_pd)),
		ibv("ibv_reg_mr", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_reg_mr)),
		ibv("ibv_dereg_mr", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_dereg_mr)),
		ibv("ibv_create_comp_channel", "IBVERBS_1.0", unsafe.Pointer(&ep.ibv_create_comp_channel)),
		ibv("ibv_destroy_comp_channel", "IBVERBS_1.0", unsafe.Pointer(&ep.ibv_destroy_comp_channel)),
		ibv("ibv_get_cq_event", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_get_cq_event)),
		ibv("ibv_ack_cq_events", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_ack_cq_events)),
		ibv("ibv_create_cq", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_create_cq)),
		ibv("ibv_destroy_cq", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_destroy_cq)),
		ibv("ibv_get_async_event", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_get_async_event)),
		ibv("ibv_ack_async_event", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_ack_async_event)),
		ibv("ibv_create_qp", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_create_qp)),
		ibv("ibv_destroy_qp", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_destroy_qp)),
		ibv("ibv_modify_qp", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_modify_qp)),
		ibv("ibv_query_qp", "IBVERBS_1.1", unsafe.Pointer(&ep.ibv_query_qp)),
		optional(ibv("ibv_reg_dmabuf_mr", "IBVERBS_1.12", unsafe.Pointer(&ep.ibv_reg_dmabuf_mr))),

		cm("rdma_get_devices", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_get_devices)),
		cm("rdma_free_devices", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_free_devices)),
		cm("rdma_create_event_channel", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_create_event_channel)),
		cm("rdma_destroy_event_channel", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_destroy_event_channel)),
		cm("rdma_get_cm_event", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_get_cm_event)),
		cm("rdma_ack_cm_event", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_ack_cm_event)),
		cm("rdma_create_id", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_create_id)),
		cm("rdma_destroy_id", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_destroy_id)),
		cm("rdma_bind_addr", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_bind_addr)),
		cm("rdma_listen", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_listen)),
		cm("rdma_resolve_addr", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_resolve_addr)),
		cm("rdma_resolve_route", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_resolve_route)),
		cm("rdma_connect", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_connect)),
		cm("rdma_accept", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_accept)),
		cm("rdma_reject", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_reject)),
		cm("rdma_disconnect", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_disconnect)),
		cm("rdma_migrate_id", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_migrate_id)),
		cm("rdma_set_option", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_set_option)),
		cm("rdma_create_qp", "RDMACM_1.0", unsafe.Pointer(&ep.rdma_create_qp)),
		cm("rdma_init_qp_attr", "RDMACM_1.2", unsafe.Pointer(&ep.rdma_init_qp_attr)),
	}
}

// errnoOf turns cgo's errno result into an Errno, EIO when a call failed
// without setting one.
func errnoOf(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return syscall.EIO
}

// --- devices ---

func ibvGetDeviceListErrno() syscall.Errno {
	var n C.int
	l, err := C.ibv_get_device_list(&n)
	if l == nil {
		return errnoOf(err)
	}
	C.ibv_free_device_list(l)
	if n == 0 {
		return syscall.ENODEV
	}
	return 0
}

func rdmaGetDevices() (devListPtr, []ctxPtr, syscall.Errno) {
	var n C.int
	l, err := C.rdma_get_devices(&n)
	if l == nil {
		return nil, nil, errnoOf(err)
	}
	arr := unsafe.Slice(l, int(n))
	ctxs := make([]ctxPtr, 0, len(arr))
	for _, c := range arr {
		if c != nil {
			ctxs = append(ctxs, ctxPtr(c))
		}
	}
	return devListPtr(l), ctxs, 0
}

func rdmaFreeDevices(l devListPtr) { C.rdma_free_devices((**C.struct_ibv_context)(l)) }

func ibvDeviceName(ctx ctxPtr) string {
	c := (*C.struct_ibv_context)(ctx)
	return C.GoString(C.ibv_get_device_name(c.device))
}

func ibvDeviceGUID(ctx ctxPtr) uint64 {
	return uint64(C.rc_device_guid((*C.struct_ibv_context)(ctx)))
}

// ibvTransportIWARP reports whether the device's transport is iWARP.
func ibvTransportIWARP(ctx ctxPtr) bool {
	c := (*C.struct_ibv_context)(ctx)
	return c.device.transport_type == C.IBV_TRANSPORT_IWARP
}

func ibvQueryDevice(ctx ctxPtr) (verbs.DeviceAttr, syscall.Errno) {
	var a C.struct_ibv_device_attr
	if r := C.ibv_query_device((*C.struct_ibv_context)(ctx), &a); r != 0 {
		return verbs.DeviceAttr{}, syscall.Errno(r)
	}
	return verbs.DeviceAttr{
		FWVersion:       C.GoString(&a.fw_ver[0]),
		NodeGUID:        uint64(C.rc_be64(C.uint64_t(a.node_guid))),
		VendorID:        uint32(a.vendor_id),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxMW:           int(a.max_mw),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
		MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		PhysPortCnt:     int(a.phys_port_cnt),
	}, 0
}

func ibvQueryPort(ctx ctxPtr, port int) (verbs.PortAttr, syscall.Errno) {
	var a C.struct_ibv_port_attr
	if r := C.rc_query_port((*C.struct_ibv_context)(ctx), C.uint8_t(port), &a); r != 0 {
		return verbs.PortAttr{}, syscall.Errno(r)
	}
	return verbs.PortAttr{
		State:      verbs.PortState(a.state),
		MaxMTU:     verbs.MTU(a.max_mtu),
		ActiveMTU:  verbs.MTU(a.active_mtu),
		GIDTblLen:  int(a.gid_tbl_len),
		LID:        uint16(a.lid),
		LinkLayer:  verbs.LinkLayer(a.link_layer),
		MaxMsgSize: uint32(a.max_msg_sz),
	}, 0
}

func ibvQueryGID(ctx ctxPtr, port, index int) (verbs.GID, syscall.Errno) {
	var g C.union_ibv_gid
	// ibv_query_gid returns -1 and sets errno.
	if r, err := C.ibv_query_gid((*C.struct_ibv_context)(ctx), C.uint8_t(port), C.int(index), &g); r != 0 {
		return verbs.GID{}, errnoOf(err)
	}
	var out verbs.GID
	copy(out[:], unsafe.Slice((*byte)(unsafe.Pointer(&g)), 16))
	return out, 0
}

// --- PD and MR ---

// ibvRegDmaBufMR registers n bytes of the dma-buf fd from offset, named
// from iova on; the caller has checked that the entry point is there.
func ibvRegDmaBufMR(pd pdPtr, offset uint64, n int, iova uint64, fd int, access verbs.Access) (mrPtr, uint32, uint32, syscall.Errno) {
	m, err := C.ibv_reg_dmabuf_mr((*C.struct_ibv_pd)(pd), C.uint64_t(offset), C.size_t(n), C.uint64_t(iova), C.int(fd), C.int(access))
	if m == nil {
		return nil, 0, 0, errnoOf(err)
	}
	return mrPtr(m), uint32(m.lkey), uint32(m.rkey), 0
}

func ibvAllocPD(ctx ctxPtr) (pdPtr, syscall.Errno) {
	p, err := C.ibv_alloc_pd((*C.struct_ibv_context)(ctx))
	if p == nil {
		return nil, errnoOf(err)
	}
	return pdPtr(p), 0
}

func ibvDeallocPD(pd pdPtr) syscall.Errno {
	return syscall.Errno(C.ibv_dealloc_pd((*C.struct_ibv_pd)(pd)))
}

// ibvRegMR registers n bytes at addr, which is memory outside the Go heap.
func ibvRegMR(pd pdPtr, addr unsafe.Pointer, n int, access verbs.Access) (mrPtr, uint32, uint32, syscall.Errno) {
	m, err := C.ibv_reg_mr((*C.struct_ibv_pd)(pd), addr, C.size_t(n), C.int(access))
	if m == nil {
		return nil, 0, 0, errnoOf(err)
	}
	return mrPtr(m), uint32(m.lkey), uint32(m.rkey), 0
}

func ibvDeregMR(mr mrPtr) syscall.Errno {
	return syscall.Errno(C.ibv_dereg_mr((*C.struct_ibv_mr)(mr)))
}

// ibvAllocMW allocates a type 2 memory window; it returns its first rkey.
func ibvAllocMW(pd pdPtr) (mwPtr, uint32, syscall.Errno) {
	w, err := C.rc_alloc_mw((*C.struct_ibv_pd)(pd))
	if w == nil {
		return nil, 0, errnoOf(err)
	}
	return mwPtr(w), uint32(w.rkey), 0
}

// setMWRKey records in the window's struct the rkey a bind posted gave
// it: providers name a window by that field in the next bind (rxe looks
// the window up by it), and only ibv_bind_mw, for type 1, keeps it.
func setMWRKey(w mwPtr, rkey uint32) {
	(*C.struct_ibv_mw)(w).rkey = C.uint32_t(rkey)
}

func ibvDeallocMW(w mwPtr) syscall.Errno {
	return syscall.Errno(C.rc_dealloc_mw((*C.struct_ibv_mw)(w)))
}

// --- completion channels and CQs ---

func ibvCreateCompChannel(ctx ctxPtr) (compChPtr, int, syscall.Errno) {
	ch, err := C.ibv_create_comp_channel((*C.struct_ibv_context)(ctx))
	if ch == nil {
		return nil, -1, errnoOf(err)
	}
	return compChPtr(ch), int(C.rc_comp_channel_fd(ch)), 0
}

func ibvDestroyCompChannel(ch compChPtr) syscall.Errno {
	return syscall.Errno(C.ibv_destroy_comp_channel((*C.struct_ibv_comp_channel)(ch)))
}

func allocCQEventOut() cqEvOutPtr {
	return cqEvOutPtr(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_rc_cq_event{}))))
}

func freeCQEventOut(p cqEvOutPtr) { C.free(unsafe.Pointer(p)) }

// ibvGetCQEvent reads one event from a (non-blocking) channel; EAGAIN when
// there is none.
func ibvGetCQEvent(ch compChPtr, out cqEvOutPtr) (cqPtr, syscall.Errno) {
	o := (*C.struct_rc_cq_event)(out)
	r, err := C.ibv_get_cq_event((*C.struct_ibv_comp_channel)(ch), &o.cq, &o.cq_context)
	if r != 0 {
		return nil, errnoOf(err)
	}
	return cqPtr(o.cq), 0
}

func ibvAckCQEvents(cq cqPtr, n int) { C.ibv_ack_cq_events((*C.struct_ibv_cq)(cq), C.uint(n)) }

func ibvCreateCQ(ctx ctxPtr, cqe int, ch compChPtr) (cqPtr, int, syscall.Errno) {
	cq, err := C.ibv_create_cq((*C.struct_ibv_context)(ctx), C.int(cqe), nil, (*C.struct_ibv_comp_channel)(ch), 0)
	if cq == nil {
		return nil, 0, errnoOf(err)
	}
	return cqPtr(cq), int(cq.cqe), 0
}

func ibvDestroyCQ(cq cqPtr) syscall.Errno {
	return syscall.Errno(C.ibv_destroy_cq((*C.struct_ibv_cq)(cq)))
}

func ibvReqNotifyCQ(cq cqPtr, solicitedOnly bool) syscall.Errno {
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	return syscall.Errno(C.ibv_req_notify_cq((*C.struct_ibv_cq)(cq), s))
}

func allocWCArray(n int) wcArrayPtr {
	return wcArrayPtr(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
}

func freeWCArray(p wcArrayPtr) { C.free(unsafe.Pointer(p)) }

// ibvPollCQ polls up to len(out) completions through the C array wcs (which
// holds at least len(out) entries) and copies them into out.
func ibvPollCQ(cq cqPtr, wcs wcArrayPtr, out []verbs.WC) (int, syscall.Errno) {
	n := C.rc_poll_cq(C.uintptr_t(uintptr(cq)), C.int(len(out)), C.uintptr_t(uintptr(wcs)))
	if n < 0 {
		return 0, syscall.Errno(-n)
	}
	arr := unsafe.Slice((*C.struct_ibv_wc)(wcs), int(n))
	for i := range arr {
		w := &arr[i]
		o := &out[i]
		o.WRID = uint64(w.wr_id)
		o.Status = verbs.WCStatus(w.status)
		o.Opcode = verbs.WCOpcode(w.opcode)
		o.VendorErr = uint32(w.vendor_err)
		o.ByteLen = uint32(w.byte_len)
		o.QPNum = uint32(w.qp_num)
		o.Flags = verbs.WCFlags(w.wc_flags)
		o.Imm = 0
		if o.Flags&verbs.WCWithImm != 0 {
			// Read in Go rather than through a C accessor: one cgo call per
			// completion fewer.
			o.Imm = binary.BigEndian.Uint32((*[4]byte)(unsafe.Pointer(&w.imm_data))[:])
		}
	}
	return int(n), 0
}

// --- asynchronous events ---

func ibvAsyncFD(ctx ctxPtr) int { return int(C.rc_async_fd((*C.struct_ibv_context)(ctx))) }

func allocAsyncOut() asyncOutPtr {
	return asyncOutPtr(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_rc_async_event{}))))
}

func freeAsyncOut(p asyncOutPtr) { C.free(unsafe.Pointer(p)) }

// ibvGetAsyncEvent reads one asynchronous event from the (non-blocking)
// context into out; it returns the CQ when the event is IBV_EVENT_CQ_ERR.
func ibvGetAsyncEvent(ctx ctxPtr, out asyncOutPtr) (cqPtr, syscall.Errno) {
	o := (*C.struct_rc_async_event)(out)
	r, err := C.rc_get_async_event((*C.struct_ibv_context)(ctx), &o.ev, &o.cq)
	if r != 0 {
		return nil, errnoOf(err)
	}
	return cqPtr(o.cq), 0
}

func ibvAckAsyncEvent(out asyncOutPtr) {
	C.ibv_ack_async_event(&(*C.struct_rc_async_event)(out).ev)
}

// --- QPs ---

// rdmaCreateQP creates an RC QP on a CM ID; c is updated with what was granted.
func rdmaCreateQP(id idPtr, pd pdPtr, scq, rcq cqPtr, c *verbs.QPCap, sigAll bool) (qpPtr, syscall.Errno) {
	var a C.struct_ibv_qp_init_attr
	initQPAttr(&a, scq, rcq, c, sigAll)
	r, err := C.rdma_create_qp((*C.struct_rdma_cm_id)(id), (*C.struct_ibv_pd)(pd), &a)
	if r != 0 {
		return nil, errnoOf(err)
	}
	readQPCap(&a.cap, c)
	return qpPtr(C.rc_id_qp((*C.struct_rdma_cm_id)(id))), 0
}

// ibvCreateQP creates an RC QP outside the CM (PD.CreateQP, and probes of
// the device's limits).
func ibvCreateQP(pd pdPtr, scq, rcq cqPtr, c *verbs.QPCap, sigAll bool) (qpPtr, syscall.Errno) {
	var a C.struct_ibv_qp_init_attr
	initQPAttr(&a, scq, rcq, c, sigAll)
	q, err := C.ibv_create_qp((*C.struct_ibv_pd)(pd), &a)
	if q == nil {
		return nil, errnoOf(err)
	}
	readQPCap(&a.cap, c)
	return qpPtr(q), 0
}

func initQPAttr(a *C.struct_ibv_qp_init_attr, scq, rcq cqPtr, c *verbs.QPCap, sigAll bool) {
	s := C.int(0)
	if sigAll {
		s = 1
	}
	C.rc_init_qp_attr(a, (*C.struct_ibv_cq)(scq), (*C.struct_ibv_cq)(rcq), C.uint32_t(c.MaxSendWR),
		C.uint32_t(c.MaxRecvWR), C.uint32_t(c.MaxSendSGE), C.uint32_t(c.MaxRecvSGE), C.uint32_t(c.MaxInlineData), s)
}

func readQPCap(a *C.struct_ibv_qp_cap, c *verbs.QPCap) {
	c.MaxSendWR = int(a.max_send_wr)
	c.MaxRecvWR = int(a.max_recv_wr)
	c.MaxSendSGE = int(a.max_send_sge)
	c.MaxRecvSGE = int(a.max_recv_sge)
	c.MaxInlineData = int(a.max_inline_data)
}

func rdmaDestroyQP(id idPtr) syscall.Errno {
	return syscall.Errno(C.rc_destroy_qp((*C.struct_rdma_cm_id)(id)))
}

func ibvDestroyQP(qp qpPtr) syscall.Errno {
	return syscall.Errno(C.ibv_destroy_qp((*C.struct_ibv_qp)(qp)))
}

func qpNum(qp qpPtr) uint32 { return uint32((*C.struct_ibv_qp)(qp).qp_num) }

func ibvModifyQP(qp qpPtr, attr *verbs.QPAttr, mask verbs.QPAttrMask) syscall.Errno {
	var a C.struct_ibv_qp_attr
	a.qp_state = C.int(attr.State)
	a.path_mtu = C.int(attr.PathMTU)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.dest_qp_num = C.uint32_t(attr.DestQPNum)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.qp_access_flags = C.uint(attr.AccessFlags)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.port_num = C.uint8_t(attr.PortNum)
	ah := &attr.AH
	a.ah_attr.dlid = C.uint16_t(ah.DLID)
	a.ah_attr.sl = C.uint8_t(ah.SL)
	a.ah_attr.src_path_bits = C.uint8_t(ah.SrcPathBits)
	a.ah_attr.static_rate = C.uint8_t(ah.StaticRate)
	a.ah_attr.port_num = C.uint8_t(ah.PortNum)
	if ah.IsGlobal {
		a.ah_attr.is_global = 1
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)), 16), ah.GRH.DGID[:])
	a.ah_attr.grh.flow_label = C.uint32_t(ah.GRH.FlowLabel)
	a.ah_attr.grh.sgid_index = C.uint8_t(ah.GRH.SGIDIndex)
	a.ah_attr.grh.hop_limit = C.uint8_t(ah.GRH.HopLimit)
	a.ah_attr.grh.traffic_class = C.uint8_t(ah.GRH.TrafficClass)
	return syscall.Errno(C.ibv_modify_qp((*C.struct_ibv_qp)(qp), &a, C.int(mask)))
}

// rdmaModifyQPInit moves the QP of id to INIT with the CM's attributes.
func rdmaModifyQPInit(id idPtr, qp qpPtr) syscall.Errno {
	return syscall.Errno(C.rc_modify_qp_init((*C.struct_rdma_cm_id)(id), (*C.struct_ibv_qp)(qp)))
}

func ibvQueryQP(qp qpPtr) (verbs.QPAttr, syscall.Errno) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	mask := C.IBV_QP_STATE | C.IBV_QP_CAP | C.IBV_QP_PATH_MTU | C.IBV_QP_MIN_RNR_TIMER | C.IBV_QP_TIMEOUT |
		C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_MAX_QP_RD_ATOMIC | C.IBV_QP_MAX_DEST_RD_ATOMIC |
		C.IBV_QP_DEST_QPN | C.IBV_QP_AV | C.IBV_QP_RQ_PSN | C.IBV_QP_SQ_PSN | C.IBV_QP_ACCESS_FLAGS |
		C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT
	if r := C.ibv_query_qp((*C.struct_ibv_qp)(qp), &a, C.int(mask), &ia); r != 0 {
		return verbs.QPAttr{}, syscall.Errno(r)
	}
	out := verbs.QPAttr{
		State:           verbs.QPState(a.qp_state),
		PathMTU:         verbs.MTU(a.path_mtu),
		MinRNRTimer:     int(a.min_rnr_timer),
		Timeout:         int(a.timeout),
		RetryCnt:        int(a.retry_cnt),
		RNRRetry:        int(a.rnr_retry),
		MaxRdAtomic:     int(a.max_rd_atomic),
		MaxDestRdAtomic: int(a.max_dest_rd_atomic),
		QPNum:           qpNum(qp),
		DestQPNum:       uint32(a.dest_qp_num),
		TrafficClass:    int(a.ah_attr.grh.traffic_class),
		RQPSN:           uint32(a.rq_psn),
		SQPSN:           uint32(a.sq_psn),
		AccessFlags:     verbs.Access(a.qp_access_flags),
		PKeyIndex:       int(a.pkey_index),
		PortNum:         int(a.port_num),
		AH: verbs.AHAttr{
			DLID:        uint16(a.ah_attr.dlid),
			SL:          int(a.ah_attr.sl),
			SrcPathBits: int(a.ah_attr.src_path_bits),
			StaticRate:  int(a.ah_attr.static_rate),
			IsGlobal:    a.ah_attr.is_global != 0,
			PortNum:     int(a.ah_attr.port_num),
			GRH: verbs.GlobalRoute{
				FlowLabel:    uint32(a.ah_attr.grh.flow_label),
				SGIDIndex:    int(a.ah_attr.grh.sgid_index),
				HopLimit:     int(a.ah_attr.grh.hop_limit),
				TrafficClass: int(a.ah_attr.grh.traffic_class),
			},
		},
	}
	copy(out.AH.GRH.DGID[:], unsafe.Slice((*byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)), 16))
	readQPCap(&a.cap, &out.Cap)
	return out, 0
}

// --- posting ---

func allocSendScratch(nwr, nsge int) sendScratch {
	return sendScratch(C.rc_alloc_send_scratch(C.int(nwr), C.int(nsge)))
}

func freeSendScratch(s sendScratch) { C.rc_free_scratch((*C.struct_rc_scratch)(s)) }

// fillSGEs copies sg into the SGEs of WR slot i of s and returns what the
// WR's sg_list takes (nil for none). The caller has checked len(sg)
// against the scratch's SGE capacity.
func fillSGEs(cs *C.struct_rc_scratch, i int, sg []verbs.SGE) *C.struct_ibv_sge {
	if len(sg) == 0 {
		return nil
	}
	sges := unsafe.Slice(cs.sge, int(cs.nwr)*int(max(cs.nsge, 1)))[i*int(cs.nsge):]
	for j := range sg {
		sges[j].addr = C.uint64_t(sg[j].Addr)
		sges[j].length = C.uint32_t(sg[j].Length)
		sges[j].lkey = C.uint32_t(sg[j].LKey)
	}
	return &sges[0]
}

// setSendWR copies wr into slot i of s; last ends the list there. The
// caller has checked len(wr.SG) against the scratch's SGE capacity. It
// writes the C structs from Go, as setRecvWR does: a cgo call per WR would
// cost more than the post itself where calls are expensive (an emulated
// guest), and the layout is rdmacore_abi.h's, checked by TestABILayout.
func setSendWR(s sendScratch, i int, wr *verbs.SendWR, last bool) {
	cs := (*C.struct_rc_scratch)(s)
	wrs := unsafe.Slice((*C.struct_ibv_send_wr)(cs.wr), int(cs.nwr))
	w := &wrs[i]
	w.wr_id = C.uint64_t(wr.WRID)
	w.next = nil
	if !last {
		w.next = &wrs[i+1]
	}
	w.sg_list = fillSGEs(cs, i, wr.SG)
	w.num_sge = C.int(len(wr.SG))
	w.opcode = C.int(wr.Opcode)
	w.send_flags = C.uint(wr.Flags)
	binary.BigEndian.PutUint32((*[4]byte)(unsafe.Pointer(&w.imm_data))[:], wr.Imm)
	// wr.rdma: remote_addr, then rkey, at the start of the union.
	rdma := (*struct {
		remoteAddr uint64
		rkey       uint32
	})(unsafe.Pointer(&w.wr))
	rdma.remoteAddr = wr.RemoteAddr
	rdma.rkey = wr.RKey
	switch wr.Opcode {
	case verbs.OpLocalInv:
		// invalidate_rkey shares imm_data's place, in host order.
		*(*uint32)(unsafe.Pointer(&w.imm_data)) = wr.InvalidateRKey
	case verbs.OpBindMW:
		// checkSend made sure that the window and region are this
		// package's.
		b := wr.Bind
		bm := (*bindMW)(unsafe.Pointer(&w.anon0))
		bm.mw = b.MW.(*memWindow).p
		bm.rkey = C.uint32_t(b.RKey)
		bm.bind_info.mr = (*C.struct_ibv_mr)(b.MR.(*memRegion).p)
		bm.bind_info.addr = C.uint64_t(b.Addr)
		bm.bind_info.length = C.uint64_t(b.Length)
		bm.bind_info.mw_access_flags = C.uint(b.Access)
	}
}

// bindMW is ibv_send_wr's bind_mw, the first member of its last union.
type bindMW struct {
	mw        mwPtr
	rkey      C.uint32_t
	bind_info C.struct_ibv_mw_bind_info
}

// Where the Go side puts bind_mw and its bind_info must be where C has them
// (the build fails otherwise).
var (
	_ [unsafe.Offsetof(C.struct_ibv_send_wr{}.anon0) - C.rc_bind_mw_off]struct{}
	_ [C.rc_bind_mw_off - unsafe.Offsetof(C.struct_ibv_send_wr{}.anon0)]struct{}
	_ [unsafe.Offsetof(bindMW{}.bind_info) - C.rc_bind_info_off]struct{}
	_ [C.rc_bind_info_off - unsafe.Offsetof(bindMW{}.bind_info)]struct{}
)

// ibvPostSend posts the list in s; on failure it returns the index of the
// refused WR (-1 if the provider did not say).
func ibvPostSend(qp qpPtr, s sendScratch) (int, syscall.Errno) {
	if r := C.rc_post_send(C.uintptr_t(uintptr(qp)), C.uintptr_t(uintptr(s))); r != 0 {
		return int((*C.struct_rc_scratch)(s).bad), syscall.Errno(r)
	}
	return 0, 0
}

func allocRecvScratch(nwr, nsge int) recvScratch {
	return recvScratch(C.rc_alloc_recv_scratch(C.int(nwr), C.int(nsge)))
}

func freeRecvScratch(s recvScratch) { C.rc_free_scratch((*C.struct_rc_scratch)(s)) }

func setRecvWR(s recvScratch, i int, wr *verbs.RecvWR, last bool) {
	cs := (*C.struct_rc_scratch)(s)
	wrs := unsafe.Slice((*C.struct_ibv_recv_wr)(cs.wr), int(cs.nwr))
	w := &wrs[i]
	w.wr_id = C.uint64_t(wr.WRID)
	w.num_sge = C.int(len(wr.SG))
	w.sg_list = fillSGEs(cs, i, wr.SG)
	w.next = nil
	if !last {
		w.next = &wrs[i+1]
	}
}

// ibvPostRecv is ibvPostSend for the receive queue.
func ibvPostRecv(qp qpPtr, s recvScratch) (int, syscall.Errno) {
	if r := C.rc_post_recv(C.uintptr_t(uintptr(qp)), C.uintptr_t(uintptr(s))); r != 0 {
		return int((*C.struct_rc_scratch)(s).bad), syscall.Errno(r)
	}
	return 0, 0
}

// --- connection manager ---

func rdmaCreateEventChannel() (ecPtr, int, syscall.Errno) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, -1, errnoOf(err)
	}
	return ecPtr(ch), int(C.rc_channel_fd(ch)), 0
}

func rdmaDestroyEventChannel(ch ecPtr) {
	C.rdma_destroy_event_channel((*C.struct_rdma_event_channel)(ch))
}

func allocCMEventOut() cmEvOutPtr {
	return cmEvOutPtr(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_rc_cm_event{}))))
}

func freeCMEventOut(p cmEvOutPtr) { C.free(unsafe.Pointer(p)) }

func rdmaCreateID(ch ecPtr) (idPtr, syscall.Errno) {
	// The out-parameter is C memory: a Go variable would escape per call.
	out := (**C.struct_rdma_cm_id)(C.calloc(1, C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(out))
	r, err := C.rdma_create_id((*C.struct_rdma_event_channel)(ch), out, nil, C.RDMA_PS_TCP)
	if r != 0 {
		return nil, errnoOf(err)
	}
	return idPtr(*out), 0
}

func rdmaDestroyID(id idPtr) syscall.Errno {
	r, err := C.rdma_destroy_id((*C.struct_rdma_cm_id)(id))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

// sockaddrOf fills ss from a TCP address; ok is false for an address that
// is neither IPv4 nor IPv6.
func sockaddrOf(ss *C.struct_sockaddr_storage, a *net.TCPAddr, scope uint32) bool {
	if ip4 := a.IP.To4(); ip4 != nil || a.IP == nil {
		var b [4]byte
		copy(b[:], ip4)
		C.rc_fill_sockaddr(ss, 0, (*C.uint8_t)(&b[0]), C.uint16_t(a.Port), 0)
		return true
	}
	if ip6 := a.IP.To16(); ip6 != nil {
		var b [16]byte
		copy(b[:], ip6)
		C.rc_fill_sockaddr(ss, 1, (*C.uint8_t)(&b[0]), C.uint16_t(a.Port), C.uint32_t(scope))
		return true
	}
	return false
}

func saPtr(ss *C.struct_sockaddr_storage) *C.struct_sockaddr {
	return (*C.struct_sockaddr)(unsafe.Pointer(ss))
}

func rdmaBindAddr(id idPtr, a *net.TCPAddr, scope uint32) syscall.Errno {
	var ss C.struct_sockaddr_storage
	if !sockaddrOf(&ss, a, scope) {
		return syscall.EAFNOSUPPORT
	}
	r, err := C.rdma_bind_addr((*C.struct_rdma_cm_id)(id), saPtr(&ss))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaListen(id idPtr, backlog int) syscall.Errno {
	r, err := C.rdma_listen((*C.struct_rdma_cm_id)(id), C.int(backlog))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaResolveAddr(id idPtr, src *net.TCPAddr, srcScope uint32, dst *net.TCPAddr, dstScope uint32, ms int) syscall.Errno {
	var sss, dss C.struct_sockaddr_storage
	var sp *C.struct_sockaddr
	if src != nil {
		if !sockaddrOf(&sss, src, srcScope) {
			return syscall.EAFNOSUPPORT
		}
		sp = saPtr(&sss)
	}
	if !sockaddrOf(&dss, dst, dstScope) {
		return syscall.EAFNOSUPPORT
	}
	r, err := C.rdma_resolve_addr((*C.struct_rdma_cm_id)(id), sp, saPtr(&dss), C.int(ms))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaResolveRoute(id idPtr, ms int) syscall.Errno {
	r, err := C.rdma_resolve_route((*C.struct_rdma_cm_id)(id), C.int(ms))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

// bytesPtr is b's first byte for C (private data is copied by librdmacm
// during the call), or nil for an empty slice.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func rdmaConnect(id idPtr, p *verbs.ConnParam) syscall.Errno {
	pd := bytesPtr(p.PrivateData)
	r, err := C.rc_connect((*C.struct_rdma_cm_id)(id), pd, C.int(len(p.PrivateData)), C.int(p.ResponderResources),
		C.int(p.InitiatorDepth), C.int(p.RetryCount), C.int(p.RNRRetryCount))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaAccept(id idPtr, p *verbs.ConnParam) syscall.Errno {
	pd := bytesPtr(p.PrivateData)
	r, err := C.rc_accept((*C.struct_rdma_cm_id)(id), pd, C.int(len(p.PrivateData)), C.int(p.ResponderResources),
		C.int(p.InitiatorDepth), C.int(p.RetryCount), C.int(p.RNRRetryCount))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaReject(id idPtr, privateData []byte) syscall.Errno {
	pd := bytesPtr(privateData)
	r, err := C.rdma_reject((*C.struct_rdma_cm_id)(id), pd, C.uint8_t(len(privateData)))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaDisconnect(id idPtr) syscall.Errno {
	r, err := C.rdma_disconnect((*C.struct_rdma_cm_id)(id))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func rdmaMigrateID(id idPtr, ch ecPtr) syscall.Errno {
	r, err := C.rdma_migrate_id((*C.struct_rdma_cm_id)(id), (*C.struct_rdma_event_channel)(ch))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

// rdmaSetTOS is rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) with
// its one-byte value.
func rdmaSetTOS(id idPtr, tos uint8) syscall.Errno {
	r, err := C.rdma_set_tos((*C.struct_rdma_cm_id)(id), C.uint8_t(tos))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

// rdmaSetAckTimeout is rdma_set_option(RDMA_OPTION_ID,
// RDMA_OPTION_ID_ACK_TIMEOUT) with its one-byte value.
func rdmaSetAckTimeout(id idPtr, timeout uint8) syscall.Errno {
	r, err := C.rdma_set_ack_timeout((*C.struct_rdma_cm_id)(id), C.uint8_t(timeout))
	if r != 0 {
		return errnoOf(err)
	}
	return 0
}

func idVerbs(id idPtr) ctxPtr { return ctxPtr(C.rc_id_verbs((*C.struct_rdma_cm_id)(id))) }

func readSockaddr(sa *C.struct_sockaddr) *net.TCPAddr {
	var ip [16]byte
	var port C.uint16_t
	var scope C.uint32_t
	switch C.rc_read_sockaddr(sa, (*C.uint8_t)(&ip[0]), &port, &scope) {
	case C.AF_INET:
		return &net.TCPAddr{IP: net.IPv4(ip[0], ip[1], ip[2], ip[3]), Port: int(port)}
	case C.AF_INET6:
		a := &net.TCPAddr{IP: append(net.IP(nil), ip[:]...), Port: int(port)}
		if scope != 0 {
			if ifi, err := net.InterfaceByIndex(int(scope)); err == nil {
				a.Zone = ifi.Name
			}
		}
		return a
	}
	return nil
}

func rdmaGetLocalAddr(id idPtr) *net.TCPAddr {
	return readSockaddr(C.rdma_get_local_addr((*C.struct_rdma_cm_id)(id)))
}

func rdmaGetPeerAddr(id idPtr) *net.TCPAddr {
	return readSockaddr(C.rdma_get_peer_addr((*C.struct_rdma_cm_id)(id)))
}

// rawCMEvent is an rdma_cm_event copied into Go memory.
type rawCMEvent struct {
	typ    verbs.CMEventType
	id     idPtr
	listen idPtr
	status int
	param  verbs.ConnParam
}

// rdmaGetCMEvent fetches one event from a (non-blocking) channel into out;
// EAGAIN when there is none.
func rdmaGetCMEvent(ch ecPtr, out cmEvOutPtr) (cmEventPtr, syscall.Errno) {
	o := (*C.struct_rc_cm_event)(out)
	r, err := C.rdma_get_cm_event((*C.struct_rdma_event_channel)(ch), &o.ev)
	if r != 0 {
		return nil, errnoOf(err)
	}
	return cmEventPtr(o.ev), 0
}

// readCMEvent copies an event, private data included, into Go memory.
func readCMEvent(ev cmEventPtr) rawCMEvent {
	e := (*C.struct_rdma_cm_event)(ev)
	out := rawCMEvent{
		typ:    verbs.CMEventType(e.event),
		id:     idPtr(e.id),
		listen: idPtr(e.listen_id),
		status: int(e.status),
	}
	switch out.typ {
	case verbs.EventConnectRequest, verbs.EventConnectResponse, verbs.EventEstablished, verbs.EventRejected:
		cp := (*C.struct_rdma_conn_param)(unsafe.Pointer(&e.param))
		if cp.private_data != nil && cp.private_data_len > 0 {
			out.param.PrivateData = C.GoBytes(cp.private_data, C.int(cp.private_data_len))
		}
		out.param.ResponderResources = int(cp.responder_resources)
		out.param.InitiatorDepth = int(cp.initiator_depth)
		out.param.RetryCount = int(cp.retry_count)
		out.param.RNRRetryCount = int(cp.rnr_retry_count)
	}
	return out
}

func rdmaAckCMEvent(ev cmEventPtr) { C.rdma_ack_cm_event((*C.struct_rdma_cm_event)(ev)) }
