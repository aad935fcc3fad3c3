/*
 * rdma_lib.h: the C API of librdma, the original rdma_lib's interface carried by Go rdma
 * conns (github.com/rdmanet/rdma/capi/clib).
 *
 * Build:  cc -Ibuild/include prog.c -Lbuild/lib -lrdma
 *    or:  cc prog.c $(pkg-config --cflags --libs rdma)
 *
 * Semantics
 *  - A server context (is_server) listens on ip:port from rdma_init on; a
 *    client context uses ip as the source address of its connections and
 *    ignores port.
 *  - Peers are numbered from 0 in connect/accept order, at most MAX_PEERS per
 *    context over its lifetime; a disconnected peer keeps its index.
 *  - rdma_send sends one message of at most buf_size bytes (as given to
 *    rdma_init) and returns len; rdma_recv receives one whole message and
 *    returns its length. A message longer than max_len is an error and stays
 *    queued, so a retry with a bigger buffer receives it.
 *  - rdma_broadcast sends one message to every connected peer; returns len.
 *  - rdma_sequential_alltoall: the server is participant 0, its connected
 *    clients are 1..n in accept order. Every participant ends with all
 *    participants' msg_size-byte blocks, in participant order, in recv_buf,
 *    which must hold (n+1)*msg_size bytes; (n+1)*msg_size must not exceed
 *    buf_size. The server exchanges with one client at a time and relays
 *    between clients. Returns 0.
 *    Bound: the call never writes more than BUFFER_SIZE (4096) bytes into
 *    recv_buf, whatever buf_size is and whatever a peer sends. A combined
 *    message longer than that (or than recv_len, below) fails with
 *    "message too long" before any of it is written, and stays queued
 *    (rdma_recv with a big enough buffer receives it). On any failure
 *    recv_buf holds no partial result: what the call wrote is zeroed.
 *  - rdma_sequential_alltoall_n is the same with the length of recv_buf:
 *    it never writes more than recv_len bytes there. Use it in new code,
 *    and whenever (n+1)*msg_size may exceed BUFFER_SIZE.
 *  - Every failing call returns -1 (rdma_init: NULL) and sets the calling
 *    thread's rdma_get_error() text and rdma_get_errno() code (one of the
 *    RDMA_ERR_ constants below, never 0 after a failure); success leaves
 *    both unchanged, as with errno.
 *  - Recovery: a peer whose connection fails (it died, or closed) is gone.
 *    Calls on it fail with RDMA_ERR_PEER_GONE; the context's other peers go
 *    on: rdma_broadcast still reaches them (and then reports the gone
 *    peer), rdma_sequential_alltoall leaves a client that fails during the
 *    exchange out and completes it with the others. The index of a gone or
 *    disconnected peer takes a new connection: rdma_reconnect_peer on a
 *    client (dials again), rdma_accept_peer_at on a server (accepts the next
 *    client as that index). Both return the index. rdma_disconnect_peer on
 *    a gone peer acknowledges it and returns 0.
 *    Calls block until done; rdma_connect_peer gives up after 10 seconds.
 *  - Calls on one context may come from several threads.
 *
 * Asynchronous calls
 *  - rdma_isend and rdma_irecv start a send or a receive, as rdma_send and
 *    rdma_recv, and return 0 at once with a request in *req. The buffer
 *    belongs to the request until it completes: do not change (isend) or
 *    read (irecv) it before then. Requests on one peer and direction run in
 *    the order they were posted (messages never overtake each other); on
 *    different peers they complete in any order. At most 4096 are pending
 *    per context (RDMA_ERR_BUSY beyond).
 *  - rdma_wait blocks until req completes; rdma_test returns at once,
 *    setting *done to 1 if it has completed (0: returns 0, still pending);
 *    rdma_waitany blocks until one of count requests completes (NULL
 *    entries are skipped), sets *index to its position and that entry to
 *    NULL. On completion each returns what rdma_send or rdma_recv would
 *    (the length, or -1 with the error) and releases the request: a
 *    request is reported complete exactly once.
 *  - rdma_cleanup cancels what is pending: such requests complete with -1
 *    and RDMA_ERR_CANCELED (and must still be waited for, to release them).
 *
 * Collectives (the Go collectives package's, with identical results)
 *  - rdma_group_init: every participant calls it at the same point. A server
 *    is rank 0 and its connected clients ranks 1..n in peer index order; it
 *    sends each client one message (its rank, the group's size, where the
 *    group's root listens and a fresh job secret), and the participants then
 *    build a mesh of connections of their own (so clients need not know each
 *    other). A client's first connected peer must be the server, with no
 *    message pending from it. Returns this context's rank; a second call
 *    builds a new group. rdma_group_size returns the group's size.
 *  - rdma_barrier, rdma_bcast (root's len bytes to every rank's buf),
 *    rdma_allgather (every rank's len bytes, in rank order, into every
 *    rank's recv_buf of recv_len >= size*len bytes), rdma_allreduce and
 *    rdma_reduce (count elements of type RDMA_INT32/INT64/FLOAT/DOUBLE
 *    combined with RDMA_SUM/PROD/MIN/MAX; recv_buf may be send_buf; for
 *    rdma_reduce recv_buf matters at the root only, elsewhere it may be
 *    NULL). Every rank calls the same collectives in the same order with
 *    matching arguments. Return 0. A rank that fails breaks the group for
 *    every rank (RDMA_ERR_GROUP_FAILED); rdma_group_init builds a new one.
 *
 * One-sided write and read
 *  - rdma_alloc returns size bytes of zeroed, page-aligned memory that the
 *    library registers with a peer's connection when it is first used with
 *    it; rdma_mem_ptr is its address (valid until rdma_free or
 *    rdma_cleanup, which frees every rdma_mem of the context; rdma_free of
 *    such a handle afterwards only releases the handle), rdma_mem_size its
 *    size. rdma_free(NULL) does nothing and returns 0. rdma_free never
 *    waits: while a one-sided call or request of this side uses the memory
 *    (or a transfer that gave up may still move its bytes, until that
 *    peer's connection is gone), it fails at once with RDMA_ERR_BUSY, and
 *    the handle and the memory stay valid, to free again later (its
 *    exposures end in the latter case).
 *  - rdma_expose registers len bytes of mem at offset for peer peer_idx
 *    only, with access RDMA_ACCESS_READ, RDMA_ACCESS_WRITE or both, and
 *    fills *desc: RDMA_DESC_SIZE bytes that the peer needs, to be sent to
 *    it (rdma_send(ctx, peer, desc, sizeof *desc)). rdma_unexpose(ctx,
 *    desc) and rdma_free end the exposure: later accesses fail. Once
 *    either returns, the library and the device touch none of those bytes
 *    again, even for an access the peer had under way (the memory may be
 *    reused at once): a READ or WRITE the peer had in flight either
 *    finished before, or fails at the peer with RDMA_ERR_REMOTE_ACCESS or
 *    a broken connection. A peer that stalls mid-transfer cannot make
 *    either call wait for it.
 *  - rdma_write copies len bytes of local at local_off into the range
 *    remote describes, at remote_off, with an RDMA WRITE on the peer's
 *    connection: the peer's CPU takes no part. It returns len once the
 *    peer's device has the bytes. rdma_read copies len bytes of that range
 *    at remote_off into local at local_off (RDMA READ) and returns len.
 *    local may be NULL for len 0.
 *  - rdma_write_notify is rdma_write whose completion the peer learns:
 *    the write carries value (0..RDMA_NOTIFY_MAX) as immediate data, and
 *    the peer's rdma_wait_notify(ctx, idx, &value, timeout_ms) returns len
 *    and sets *value once the bytes have landed in its memory (notifications
 *    come in the order they were written). timeout_ms < 0 waits without
 *    limit; RDMA_ERR_TIMEOUT after it. A peer may have at most its receive
 *    depth (128) notifications not yet taken: wait for them as they come, or
 *    the writer's calls (and its rdma_send) stall until they are taken.
 *  - rdma_write_timeout, rdma_write_notify_timeout and rdma_read_timeout
 *    are those calls waiting at most timeout_ms (< 0: no limit) to be
 *    posted: for a send slot, and for rdma_write_notify_timeout the peer's
 *    credit (which it returns only as it takes notifications). They fail
 *    with RDMA_ERR_TIMEOUT then, having sent nothing; once posted, an
 *    operation runs to its completion, which the transport's retry timeout
 *    bounds. A peer that never takes its notifications so holds a caller
 *    no longer than its timeout.
 *  - rdma_iwrite and rdma_iread start rdma_write and rdma_read as requests
 *    (rdma_wait, rdma_test, rdma_waitany, cancelled by rdma_cleanup); local
 *    belongs to the request until it completes. They complete in any order.
 *  - Guarantees and protection: the descriptor is checked first (its form,
 *    that it grants the access, that remote_off + len is within its
 *    length): a bad one fails with RDMA_ERR_BAD_DESC and disturbs nothing.
 *    What is really allowed is decided by the exposing side's device, as
 *    with any RDMA NIC: the rkey, the bounds and the access of every WRITE
 *    and READ are checked against the registration, so a forged, stretched
 *    or revoked descriptor, or a read of memory exposed for write only,
 *    never touches memory outside what was exposed. Such an access fails
 *    with RDMA_ERR_REMOTE_ACCESS and, as on every RDMA device, breaks the
 *    reliable connection to that peer on both sides (the peer is gone:
 *    RDMA_ERR_PEER_GONE afterwards; rdma_reconnect_peer or
 *    rdma_accept_peer_at gives it a new connection). A range exposed for
 *    write can be written by that peer at any time: do not expose memory
 *    whose contents matter to the program's safety, and check what lands.
 *    One-sided calls need the peer's connection to have a queue pair
 *    (RDMA_ERR_NOT_SUPPORTED otherwise).
 *
 * Quality of service
 *  - rdma_set_tos sets the context's traffic class, the IP type of service
 *    0..255 (the DSCP is its top six bits: tos = dscp << 2), for the
 *    connections it makes from then on: those rdma_connect_peer and
 *    rdma_reconnect_peer dial and those a server accepts. Connections made
 *    before keep theirs. On an RDMA device it is the connection manager's
 *    TOS (rdma_set_option RDMA_OPTION_ID_TOS), which becomes the queue
 *    pair's traffic class (on RoCE an accepted connection's follows its
 *    dialer's); on the software provider, the IP_TOS (IPV6_TCLASS) of the
 *    TCP socket under the connection. 0 is the system's default.
 *  - rdma_get_tos(ctx, peer_idx) returns the traffic class peer_idx's
 *    connection carries, read back from the wire side (the queue pair's
 *    attribute, or the socket option); rdma_get_tos(ctx, -1) the context's
 *    setting.
 */
#ifndef RDMA_LIB_H
#define RDMA_LIB_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MAX_PEERS 64
#define MAX_WR 128
#define CQ_DEPTH 256
#define BUFFER_SIZE 4096

/* rdma_get_errno() codes. */
#define RDMA_ERR_INVALID 1        /* an argument is invalid */
#define RDMA_ERR_BAD_CONTEXT 2    /* ctx is NULL or not a live context */
#define RDMA_ERR_CLOSED 3         /* the context is being cleaned up */
#define RDMA_ERR_NOT_SERVER 4     /* accepting on a client context */
#define RDMA_ERR_TOO_MANY_PEERS 5 /* MAX_PEERS reached */
#define RDMA_ERR_NO_SUCH_PEER 6   /* no peer has that index */
#define RDMA_ERR_DISCONNECTED 7   /* the peer was disconnected by this side */
#define RDMA_ERR_PEER_GONE 8      /* the peer's connection failed or it closed */
#define RDMA_ERR_NO_PEERS 9       /* no connected peers */
#define RDMA_ERR_MSG_SIZE 10      /* a message does not fit */
#define RDMA_ERR_PROTOCOL 11      /* a peer broke the protocol */
#define RDMA_ERR_PEER_CONNECTED 12 /* the index has a live peer */
#define RDMA_ERR_CONNECT 13       /* connecting failed: refused, unreachable, timed out */
#define RDMA_ERR_INTERNAL 14      /* a bug in the library */
#define RDMA_ERR_NO_GROUP 15      /* a collective before rdma_group_init */
#define RDMA_ERR_GROUP_FAILED 16  /* the group broke: a rank failed or left */
#define RDMA_ERR_BUSY 17          /* too many requests in flight (4096 per context), or rdma_free of memory in use */
#define RDMA_ERR_CANCELED 18      /* the request's context was cleaned up */
#define RDMA_ERR_BAD_REQUEST 19   /* req is not a pending request */
#define RDMA_ERR_REMOTE_ACCESS 20 /* the peer's device refused a one-sided access; the peer is gone */
#define RDMA_ERR_BAD_DESC 21      /* a descriptor is malformed or does not allow the access */
#define RDMA_ERR_TIMEOUT 22       /* rdma_wait_notify or a one-sided _timeout call timed out */
#define RDMA_ERR_NOT_SUPPORTED 23 /* the peer's connection cannot do one-sided operations */
#define RDMA_ERR_BAD_MEM 24       /* mem is NULL, or not a live rdma_mem */

/* Element types and operators of rdma_allreduce and rdma_reduce. */
#define RDMA_INT32 1
#define RDMA_INT64 2
#define RDMA_FLOAT 3
#define RDMA_DOUBLE 4
#define RDMA_SUM 1
#define RDMA_PROD 2
#define RDMA_MIN 3
#define RDMA_MAX 4

/* One-sided access rights, descriptor size, largest notification value. */
#define RDMA_ACCESS_READ 1
#define RDMA_ACCESS_WRITE 2
#define RDMA_DESC_SIZE 32
#define RDMA_NOTIFY_MAX 536870911 /* 2^29 - 1 */

/* Opaque: handles, never dereferenced. */
typedef struct rdma_context rdma_context;
typedef struct rdma_request rdma_request;
typedef struct rdma_mem rdma_mem;

/* A descriptor of an exposed range: plain bytes, safe to copy and send. */
typedef struct rdma_desc {
    unsigned char bytes[RDMA_DESC_SIZE];
} rdma_desc;

rdma_context* rdma_init(const char *ip, int port, size_t buf_size, bool is_server);
void rdma_cleanup(rdma_context *ctx);

int rdma_connect_peer(rdma_context *ctx, const char *peer_ip, int peer_port);
int rdma_accept_peer(rdma_context *ctx);
int rdma_disconnect_peer(rdma_context *ctx, int peer_idx);
int rdma_reconnect_peer(rdma_context *ctx, int peer_idx, const char *peer_ip, int peer_port);
int rdma_accept_peer_at(rdma_context *ctx, int peer_idx);

int rdma_send(rdma_context *ctx, int peer_idx, const void *data, size_t len);
int rdma_recv(rdma_context *ctx, int peer_idx, void *data, size_t max_len);
int rdma_broadcast(rdma_context *ctx, const void *data, size_t len);
int rdma_sequential_alltoall(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t msg_size);
int rdma_sequential_alltoall_n(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t recv_len, size_t msg_size);

int rdma_isend(rdma_context *ctx, int peer_idx, const void *data, size_t len, rdma_request **req);
int rdma_irecv(rdma_context *ctx, int peer_idx, void *data, size_t max_len, rdma_request **req);
int rdma_wait(rdma_request *req);
int rdma_test(rdma_request *req, int *done);
int rdma_waitany(rdma_request **reqs, int count, int *index);

int rdma_group_init(rdma_context *ctx);
int rdma_group_size(rdma_context *ctx);
int rdma_barrier(rdma_context *ctx);
int rdma_bcast(rdma_context *ctx, void *buf, size_t len, int root);
int rdma_allgather(rdma_context *ctx, const void *send_buf, size_t len, void *recv_buf, size_t recv_len);
int rdma_allreduce(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t count, int datatype, int op);
int rdma_reduce(rdma_context *ctx, const void *send_buf, void *recv_buf, size_t count, int datatype, int op, int root);

rdma_mem* rdma_alloc(rdma_context *ctx, size_t size);
void* rdma_mem_ptr(rdma_mem *mem);
size_t rdma_mem_size(rdma_mem *mem);
int rdma_free(rdma_mem *mem);
int rdma_expose(rdma_context *ctx, int peer_idx, rdma_mem *mem, size_t offset, size_t len, int access, rdma_desc *desc);
int rdma_unexpose(rdma_context *ctx, const rdma_desc *desc);
int rdma_write(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len);
int rdma_write_notify(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, unsigned int value);
int rdma_read(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len);
int rdma_wait_notify(rdma_context *ctx, int peer_idx, unsigned int *value, int timeout_ms);
int rdma_write_timeout(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, int timeout_ms);
int rdma_write_notify_timeout(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, unsigned int value, int timeout_ms);
int rdma_read_timeout(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, int timeout_ms);
int rdma_iwrite(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, rdma_request **req);
int rdma_iread(rdma_context *ctx, int peer_idx, const rdma_desc *remote, size_t remote_off, rdma_mem *local, size_t local_off, size_t len, rdma_request **req);

int rdma_set_tos(rdma_context *ctx, int tos);
int rdma_get_tos(rdma_context *ctx, int peer_idx);

const char* rdma_get_error(void);
int rdma_get_errno(void);

#ifdef __cplusplus
}
#endif

#endif /* RDMA_LIB_H */
