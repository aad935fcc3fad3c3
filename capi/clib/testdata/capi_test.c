// capi_test drives librdma.so from C threads, as a C user of rdma_lib.h
// would: a server and clients in pthreads on loopback (127.0.0.1 serves,
// 127.0.0.2 and 127.0.0.3 are clients), send/recv of every size up to the
// buffer, broadcast, all-to-all, and every error with its text, including
// that rdma_get_error() is per thread.
//
// Usage: capi_test [simple_client client async onesided]   (with the paths of
// examples/c's simple_client, client, async and onesided, also runs them: the first
// two against servers on 127.0.0.1:5555, in a network namespace of their own where the test may
// make one, so that nothing else on the host shares that port: the simple
// client against an ordinary server, and client against a hostile server
// that sends more than the client's receive buffer holds)
//
// make test-c builds this test, the library's callers and the examples with
// AddressSanitizer: a write past a buffer fails the run.
//
// Exits 0 when every check passed; each failed check prints a line.
#define _GNU_SOURCE // unshare
#include "rdma_lib.h"

#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

_Static_assert(MAX_PEERS == 64, "MAX_PEERS");
_Static_assert(MAX_WR == 128, "MAX_WR");
_Static_assert(CQ_DEPTH == 256, "CQ_DEPTH");
_Static_assert(BUFFER_SIZE == 4096, "BUFFER_SIZE");

static int failures;
static int checks;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        __atomic_add_fetch(&checks, 1, __ATOMIC_SEQ_CST);                 \
        if (!(cond)) {                                                    \
            flockfile(stderr);                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            funlockfile(stderr);                                          \
            __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);           \
        }                                                                 \
    } while (0)

// EXPECT_ERROR: call returned fail_value and this thread's error text
// contains want.
#define EXPECT_ERROR(ret, fail_value, want)                                   \
    do {                                                                      \
        long ret_ = (long)(ret);                                              \
        const char *err_ = rdma_get_error();                                  \
        CHECK(ret_ == (long)(fail_value), "returned %ld, want %ld (error '%s')", \
              ret_, (long)(fail_value), err_);                                \
        CHECK(err_ != NULL && strstr(err_, want) != NULL,                     \
              "error text '%s' lacks '%s'", err_ ? err_ : "(null)", want);    \
    } while (0)

#define EXPECT_OK(ret, want)                                                  \
    do {                                                                      \
        long ret_ = (long)(ret);                                              \
        CHECK(ret_ == (long)(want), "returned %ld, want %ld (error '%s')",    \
              ret_, (long)(want), rdma_get_error());                          \
    } while (0)

#define EXPECT_NOERR(ret)                                                     \
    do {                                                                      \
        long ret_ = (long)(ret);                                              \
        CHECK(ret_ >= 0, "returned %ld (error '%s')", ret_, rdma_get_error()); \
    } while (0)

#define EXPECT_ERRNO(ret, want_code, want_text)                               \
    do {                                                                      \
        EXPECT_ERROR(ret, -1, want_text);                                     \
        CHECK(rdma_get_errno() == (want_code), "errno %d, want %s (%d); error '%s'", \
              rdma_get_errno(), #want_code, want_code, rdma_get_error());      \
    } while (0)

static int test_port;

// new_server listens on 127.0.0.1 on a free port of its choosing.
static rdma_context *new_server(size_t buf_size) {
    for (int i = 0; i < 100; i++) {
        int port = test_port++;
        rdma_context *ctx = rdma_init("127.0.0.1", port, buf_size, true);
        if (ctx) {
            return ctx;
        }
    }
    CHECK(0, "no free port for a server: %s", rdma_get_error());
    exit(1);
}

static void fill(unsigned char *p, size_t n, unsigned first) {
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(first + i * 7);
    }
}

// ---- arguments, contexts and their errors ------------------------------

static void test_bad_arguments(void) {
    EXPECT_ERROR(rdma_init(NULL, 1, 64, true), NULL, "rdma_init: ip is NULL");
    EXPECT_ERROR(rdma_init("nope", 1, 64, false), NULL, "\"nope\" is not an IP address");
    EXPECT_ERROR(rdma_init("127.0.0.1", 1, 0, true), NULL, "buffer size 0 is not in 1..");
    EXPECT_ERROR(rdma_init("127.0.0.1", 1, (size_t)1 << 40, true), NULL, "buffer size 1099511627776 is too large");
    EXPECT_ERROR(rdma_init("127.0.0.1", 70000, 64, true), NULL, "port 70000");

    char buf[16] = {0};
    rdma_context *nil = NULL;
    EXPECT_ERROR(rdma_connect_peer(nil, "127.0.0.1", 1), -1, "rdma_connect_peer: ctx is NULL");
    CHECK(rdma_get_errno() == RDMA_ERR_BAD_CONTEXT, "errno %d", rdma_get_errno());
    EXPECT_ERRNO(rdma_reconnect_peer(nil, 0, "127.0.0.1", 1), RDMA_ERR_BAD_CONTEXT, "rdma_reconnect_peer: ctx is NULL");
    EXPECT_ERRNO(rdma_accept_peer_at(nil, 0), RDMA_ERR_BAD_CONTEXT, "rdma_accept_peer_at: ctx is NULL");
    EXPECT_ERROR(rdma_accept_peer(nil), -1, "rdma_accept_peer: ctx is NULL");
    EXPECT_ERROR(rdma_disconnect_peer(nil, 0), -1, "rdma_disconnect_peer: ctx is NULL");
    EXPECT_ERROR(rdma_send(nil, 0, buf, 1), -1, "rdma_send: ctx is NULL");
    EXPECT_ERROR(rdma_recv(nil, 0, buf, 1), -1, "rdma_recv: ctx is NULL");
    EXPECT_ERROR(rdma_broadcast(nil, buf, 1), -1, "rdma_broadcast: ctx is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall(nil, buf, buf, 1), -1, "rdma_sequential_alltoall: ctx is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall_n(nil, buf, buf, sizeof(buf), 1), -1, "rdma_sequential_alltoall_n: ctx is NULL");
    rdma_cleanup(NULL); // like free(NULL): nothing happens

    // A pointer that rdma_init never returned.
    rdma_context *bogus = (rdma_context *)(uintptr_t)0x5eed;
    EXPECT_ERROR(rdma_send(bogus, 0, buf, 1), -1, "not a live rdma_context");
    EXPECT_ERROR(rdma_accept_peer(bogus), -1, "not a live rdma_context");

    // A client context: argument errors, and no accepting.
    rdma_context *cl = rdma_init("127.0.0.2", 0, 64, false);
    CHECK(cl != NULL, "client init: %s", rdma_get_error());
    EXPECT_ERRNO(rdma_accept_peer(cl), RDMA_ERR_NOT_SERVER, "rdma_accept_peer: accept: not a server context");
    EXPECT_ERRNO(rdma_accept_peer_at(cl, 0), RDMA_ERR_NOT_SERVER, "rdma_accept_peer_at: accept: not a server context");
    EXPECT_ERRNO(rdma_reconnect_peer(cl, 0, "127.0.0.1", 1), RDMA_ERR_NO_SUCH_PEER, "reconnect peer 0: no such peer");
    EXPECT_ERRNO(rdma_reconnect_peer(cl, 0, NULL, 1), RDMA_ERR_INVALID, "peer_ip is NULL");
    EXPECT_ERRNO(rdma_connect_peer(cl, "127.0.0.1", 1), RDMA_ERR_CONNECT, "rdma_connect_peer: connect to 127.0.0.1:1 from 127.0.0.2");
    EXPECT_ERROR(rdma_connect_peer(cl, NULL, 1), -1, "peer_ip is NULL");
    EXPECT_ERROR(rdma_connect_peer(cl, "x.y", 1), -1, "\"x.y\" is not an IP address");
    EXPECT_ERRNO(rdma_send(cl, 0, buf, 1), RDMA_ERR_NO_SUCH_PEER, "send to peer 0: no such peer (the context has 0 peers)");
    EXPECT_ERROR(rdma_send(cl, 0, NULL, 1), -1, "rdma_send: data is NULL");
    EXPECT_ERROR(rdma_send(cl, 0, buf, 65), -1, "message too long");
    EXPECT_ERROR(rdma_recv(cl, 0, NULL, 1), -1, "rdma_recv: data is NULL");
    EXPECT_ERROR(rdma_recv(cl, -3, buf, 1), -1, "recv from peer -3: no such peer");
    EXPECT_ERROR(rdma_broadcast(cl, NULL, 1), -1, "rdma_broadcast: data is NULL");
    EXPECT_ERROR(rdma_broadcast(cl, buf, 1), -1, "no connected peers");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, NULL, buf, 1), -1, "send_buf is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, buf, NULL, 1), -1, "recv_buf is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, buf, buf, 0), -1, "msg_size is 0");
    EXPECT_ERROR(rdma_sequential_alltoall(cl, buf, buf, 1), -1, "no connected peers");
    EXPECT_ERROR(rdma_sequential_alltoall_n(cl, NULL, buf, sizeof(buf), 1), -1, "send_buf is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall_n(cl, buf, NULL, sizeof(buf), 1), -1, "recv_buf is NULL");
    EXPECT_ERROR(rdma_sequential_alltoall_n(cl, buf, buf, sizeof(buf), 0), -1, "msg_size is 0");
    EXPECT_ERROR(rdma_sequential_alltoall_n(cl, buf, buf, sizeof(buf), 1), -1, "no connected peers");
    EXPECT_ERROR(rdma_disconnect_peer(cl, 0), -1, "no such peer");
    rdma_cleanup(cl);
    // Used after cleanup: an error, not a crash.
    EXPECT_ERROR(rdma_send(cl, 0, buf, 1), -1, "already passed to rdma_cleanup");
    rdma_cleanup(cl);
    CHECK(strstr(rdma_get_error(), "rdma_cleanup: ctx is not a live rdma_context") != NULL,
          "double cleanup: '%s'", rdma_get_error());
}

// ---- rdma_get_error is per thread --------------------------------------

#define ERR_THREADS 4
static pthread_barrier_t err_barrier;

static void *error_thread(void *arg) {
    int id = (int)(intptr_t)arg;
    char ip[32], want[48];
    snprintf(ip, sizeof(ip), "bad-ip-%d", id);
    snprintf(want, sizeof(want), "\"bad-ip-%d\" is not an IP address", id);
    for (int round = 0; round < 50; round++) {
        rdma_context *ctx = rdma_init(ip, 1, 64, false);
        CHECK(ctx == NULL, "init of %s succeeded", ip);
        // Every thread sets its error before any thread reads its own.
        pthread_barrier_wait(&err_barrier);
        CHECK(strstr(rdma_get_error(), want) != NULL, "thread %d sees '%s'", id, rdma_get_error());
        pthread_barrier_wait(&err_barrier);
    }
    return NULL;
}

static void test_thread_local_errors(void) {
    pthread_t t[ERR_THREADS];
    pthread_barrier_init(&err_barrier, NULL, ERR_THREADS);
    for (int i = 0; i < ERR_THREADS; i++) {
        pthread_create(&t[i], NULL, error_thread, (void *)(intptr_t)i);
    }
    for (int i = 0; i < ERR_THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_barrier_destroy(&err_barrier);
}

// ---- a server and two clients in threads -------------------------------

#define STAR_CLIENTS 2
#define MSG 64
#define ROUNDS 20

static int star_port;
static pthread_barrier_t star_barrier; // server + clients

static const size_t sizes[] = {0, 1, 63, 64, 65, 1000, BUFFER_SIZE - 1, BUFFER_SIZE};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void make_block(char *b, int participant, int round) {
    memset(b, 0, MSG);
    snprintf(b, MSG, "participant %d round %d", participant, round);
}

static void check_combined(const char *who, const char *recv, int participants, int round) {
    char want[MSG];
    for (int p = 0; p < participants; p++) {
        make_block(want, p, round);
        CHECK(memcmp(recv + p * MSG, want, MSG) == 0, "%s round %d block %d is '%.*s', want '%s'",
              who, round, p, MSG, recv + p * MSG, want);
    }
}

struct client_arg {
    const char *ip;
    int participant; // told by the server
};

static void *client_thread(void *argp) {
    struct client_arg *arg = argp;
    rdma_context *ctx = rdma_init(arg->ip, 9 /* ignored */, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client %s init: %s", arg->ip, rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    int srv = rdma_connect_peer(ctx, "127.0.0.1", star_port);
    EXPECT_OK(srv, 0);

    // The server tells each client its participant number.
    int n = rdma_recv(ctx, srv, &arg->participant, sizeof(arg->participant));
    EXPECT_OK(n, sizeof(arg->participant));

    // Every size up to the buffer, both ways: the server echoes.
    unsigned char *out = malloc(BUFFER_SIZE + 1), *in = malloc(BUFFER_SIZE);
    for (size_t i = 0; i < NSIZES; i++) {
        fill(out, sizes[i], (unsigned)(i + arg->participant));
        EXPECT_OK(rdma_send(ctx, srv, out, sizes[i]), sizes[i]);
        memset(in, 0xee, BUFFER_SIZE);
        EXPECT_OK(rdma_recv(ctx, srv, in, BUFFER_SIZE), sizes[i]);
        CHECK(memcmp(in, out, sizes[i]) == 0, "echo of %zu bytes differs", sizes[i]);
    }
    // One byte over the buffer size is refused before anything is sent.
    EXPECT_ERROR(rdma_send(ctx, srv, out, BUFFER_SIZE + 1), -1,
                 "rdma_send: message too long: len 4097 is too large (the limit is 4096)");

    // A message longer than max_len stays queued for a retry.
    EXPECT_ERROR(rdma_recv(ctx, srv, in, 99), -1,
                 "message too long: the 100-byte message does not fit in 99 bytes (it stays queued");
    EXPECT_OK(rdma_recv(ctx, srv, in, 100), 100);
    fill(out, 100, 42);
    CHECK(memcmp(in, out, 100) == 0, "the queued message differs");

    // Broadcast from the server.
    char b[16] = {0};
    EXPECT_OK(rdma_recv(ctx, srv, b, sizeof(b)), 10);
    CHECK(strcmp(b, "broadcast") == 0, "broadcast got '%s'", b);

    // All-to-all, round after round.
    char send[MSG], recv[(STAR_CLIENTS + 1) * MSG];
    for (int round = 0; round < ROUNDS; round++) {
        make_block(send, arg->participant, round);
        memset(recv, 0, sizeof(recv));
        EXPECT_OK(rdma_sequential_alltoall(ctx, send, recv, MSG), 0);
        check_combined(arg->ip, recv, STAR_CLIENTS + 1, round);
    }
    pthread_barrier_wait(&star_barrier); // all-to-all done everywhere

    // Participant 2 leaves; participant 1 then sees a two-party all-to-all.
    if (arg->participant == 2) {
        EXPECT_OK(rdma_disconnect_peer(ctx, srv), 0);
        EXPECT_ERROR(rdma_disconnect_peer(ctx, srv), -1, "disconnect peer 0: peer disconnected");
        EXPECT_ERROR(rdma_send(ctx, srv, b, 1), -1, "send to peer 0: peer disconnected");
        EXPECT_ERROR(rdma_recv(ctx, srv, b, 1), -1, "recv from peer 0: peer disconnected");
        pthread_barrier_wait(&star_barrier); // disconnected
    } else {
        pthread_barrier_wait(&star_barrier);
        make_block(send, 1, 99);
        EXPECT_OK(rdma_sequential_alltoall(ctx, send, recv, MSG), 0);
        check_combined(arg->ip, recv, 2, 99);
    }
    free(out);
    free(in);
    rdma_cleanup(ctx);
    return NULL;
}

static void test_star(void) {
    rdma_context *srv = new_server(BUFFER_SIZE);
    star_port = test_port - 1;
    pthread_barrier_init(&star_barrier, NULL, STAR_CLIENTS + 1);
    struct client_arg args[STAR_CLIENTS] = {{"127.0.0.2", 0}, {"127.0.0.3", 0}};
    pthread_t t[STAR_CLIENTS];
    for (int i = 0; i < STAR_CLIENTS; i++) {
        pthread_create(&t[i], NULL, client_thread, &args[i]);
    }
    for (int i = 0; i < STAR_CLIENTS; i++) {
        EXPECT_OK(rdma_accept_peer(srv), i);
    }
    for (int i = 0; i < STAR_CLIENTS; i++) {
        int participant = i + 1;
        EXPECT_OK(rdma_send(srv, i, &participant, sizeof(participant)), sizeof(participant));
    }
    EXPECT_ERROR(rdma_send(srv, STAR_CLIENTS, "x", 1), -1, "send to peer 2: no such peer (the context has 2 peers)");

    // Echo every size, from each client in turn.
    unsigned char *buf = malloc(BUFFER_SIZE);
    for (size_t i = 0; i < NSIZES; i++) {
        for (int c = 0; c < STAR_CLIENTS; c++) {
            int n = rdma_recv(srv, c, buf, BUFFER_SIZE);
            EXPECT_OK(n, sizes[i]);
            EXPECT_OK(rdma_send(srv, c, buf, n < 0 ? 0 : (size_t)n), sizes[i]);
        }
    }
    fill(buf, 100, 42);
    for (int c = 0; c < STAR_CLIENTS; c++) {
        EXPECT_OK(rdma_send(srv, c, buf, 100), 100);
    }
    EXPECT_OK(rdma_broadcast(srv, "broadcast", 10), 10);

    char send[MSG], recv[(STAR_CLIENTS + 1) * MSG];
    for (int round = 0; round < ROUNDS; round++) {
        make_block(send, 0, round);
        memset(recv, 0, sizeof(recv));
        EXPECT_OK(rdma_sequential_alltoall(srv, send, recv, MSG), 0);
        check_combined("server", recv, STAR_CLIENTS + 1, round);
    }
    // Three 2048-byte blocks do not fit the 4096-byte buffer.
    char big[2048] = {0}, bigrecv[3 * 2048];
    EXPECT_ERROR(rdma_sequential_alltoall(srv, big, bigrecv, sizeof(big)), -1,
                 "3 participants of 2048 bytes make 6144 bytes, more than the buffer size of 4096 bytes");
    pthread_barrier_wait(&star_barrier);

    pthread_barrier_wait(&star_barrier); // participant 2 has disconnected
    EXPECT_ERROR(rdma_recv(srv, 1, buf, BUFFER_SIZE), -1, "recv from peer 1: the peer closed the connection");
    EXPECT_OK(rdma_disconnect_peer(srv, 1), 0);
    make_block(send, 0, 99);
    EXPECT_OK(rdma_sequential_alltoall(srv, send, recv, MSG), 0);
    check_combined("server", recv, 2, 99);

    for (int i = 0; i < STAR_CLIENTS; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_barrier_destroy(&star_barrier);
    free(buf);
    rdma_cleanup(srv);
}

// ---- a server that sends more than the client's recv_buf holds ---------

// A server may send anything: here, through the library's own rdma_send,
// combined messages longer than the client's receive buffer. The client's
// buffers are malloc'd to their exact length, so that AddressSanitizer
// catches a single byte written past them.
static rdma_context *hostile_srv;
static int hostile_port;

static void *hostile_client(void *arg) {
    (void)arg;
    rdma_context *ctx = rdma_init("127.0.0.2", 0, BUFFER_SIZE * 4, false);
    CHECK(ctx != NULL, "client init: %s", rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    EXPECT_OK(rdma_connect_peer(ctx, "127.0.0.1", hostile_port), 0);
    char send[MSG];
    memset(send, 'c', sizeof(send));

    // 1. 16384 bytes against rdma_sequential_alltoall's BUFFER_SIZE bound:
    //    refused before a byte is written.
    unsigned char *recv = malloc(BUFFER_SIZE);
    memset(recv, 0xee, BUFFER_SIZE);
    EXPECT_ERROR(rdma_sequential_alltoall(ctx, send, recv, MSG), -1,
                 "rdma_sequential_alltoall: all-to-all: recv from peer 0: message too long: the combined message "
                 "of 16384 bytes (256 blocks of 64) does not fit in the receive buffer of 4096 bytes (the message stays queued)");
    CHECK(strstr(rdma_get_error(), "pass the buffer's length to rdma_sequential_alltoall_n") != NULL,
          "no hint: '%s'", rdma_get_error());
    int untouched = 1;
    for (size_t i = 0; i < BUFFER_SIZE; i++) {
        untouched &= recv[i] == 0xee;
    }
    CHECK(untouched, "recv_buf was written by a failed all-to-all");

    // 2. The queued message goes to a buffer that holds it, with its length.
    unsigned char *big = malloc(4 * BUFFER_SIZE);
    EXPECT_OK(rdma_recv(ctx, 0, big, 4 * BUFFER_SIZE), 4 * BUFFER_SIZE);
    CHECK(big[0] == 's' && big[4 * BUFFER_SIZE - 1] == 's', "the queued message differs");

    // 3. rdma_sequential_alltoall_n with the exact length of a buffer one
    //    block short of the combined message; then with room for it.
    unsigned char *small = malloc(3 * MSG);
    EXPECT_ERROR(rdma_sequential_alltoall_n(ctx, send, small, 3 * MSG, MSG), -1,
                 "the combined message of 256 bytes (4 blocks of 64) does not fit in the receive buffer of 192 bytes");
    EXPECT_OK(rdma_recv(ctx, 0, big, 4 * BUFFER_SIZE), 4 * MSG); // the refused one
    EXPECT_OK(rdma_sequential_alltoall_n(ctx, send, big, 4 * BUFFER_SIZE, MSG), 0);
    CHECK(big[0] == 's' && big[4 * MSG - 1] == 's', "the combined message differs");

    // 4. Exactly BUFFER_SIZE fits rdma_sequential_alltoall; one block more
    //    does not.
    EXPECT_OK(rdma_sequential_alltoall(ctx, send, recv, MSG), 0);
    CHECK(recv[0] == 's' && recv[BUFFER_SIZE - 1] == 's', "the 4096-byte combined message differs");
    EXPECT_ERROR(rdma_sequential_alltoall(ctx, send, recv, MSG), -1,
                 "the combined message of 4160 bytes (65 blocks of 64) does not fit in the receive buffer of 4096 bytes");
    free(small);
    free(big);
    free(recv);
    rdma_cleanup(ctx);
    return NULL;
}

// hostile_send receives a client's block and answers with a combined
// message of n bytes.
static void hostile_send(size_t n) {
    char block[MSG];
    EXPECT_OK(rdma_recv(hostile_srv, 0, block, sizeof(block)), MSG);
    char *msg = malloc(n);
    memset(msg, 's', n);
    EXPECT_OK(rdma_send(hostile_srv, 0, msg, n), n);
    free(msg);
}

static void test_hostile_server(void) {
    hostile_srv = new_server(BUFFER_SIZE * 4);
    hostile_port = test_port - 1;
    pthread_t t;
    pthread_create(&t, NULL, hostile_client, NULL);
    EXPECT_OK(rdma_accept_peer(hostile_srv), 0);
    hostile_send(4 * BUFFER_SIZE); // 1 and 2
    hostile_send(4 * MSG);         // 3: refused, then received
    hostile_send(4 * MSG);         // 3: fits
    hostile_send(BUFFER_SIZE);     // 4
    hostile_send(BUFFER_SIZE + MSG);
    pthread_join(t, NULL);
    rdma_cleanup(hostile_srv);
}

// ---- a peer killed mid-run, replaced, while the others go on -------------

// The server runs one pthread per peer index, each an echo loop with its
// peer. Peer 0 is another process (this program with --echo-client), which
// its server thread kills with SIGKILL in round KILL_ROUND and replaces:
// a new process, accepted at index 0 with rdma_accept_peer_at. Peer 2's
// server thread drops it in round DROP_ROUND; that client, a pthread, sees
// its server gone and comes back with rdma_reconnect_peer. Peer 1 echoes
// throughout, untouched.
#define RECOVERY_ROUNDS 12
#define KILL_ROUND 3
#define DROP_ROUND 6

static rdma_context *rec_srv;
static int rec_port;
// accept_lock: one replacement at a time, so that each rdma_accept_peer_at
// takes the client meant for its index.
static pthread_mutex_t accept_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *self_path;
static pid_t rec_child; // the first echo client process

static pid_t start_echo_client(void) {
    char port[16];
    snprintf(port, sizeof(port), "%d", rec_port);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_path, self_path, "--echo-client", port, (char *)NULL);
        _exit(127);
    }
    return pid;
}

// echo_client_main is the --echo-client process: it echoes every message
// until "bye".
static int echo_client_main(int port) {
    rdma_context *ctx = rdma_init("127.0.0.4", 0, BUFFER_SIZE, false);
    if (!ctx || rdma_connect_peer(ctx, "127.0.0.1", port) != 0) {
        fprintf(stderr, "echo client: %s\n", rdma_get_error());
        return 1;
    }
    char b[64];
    for (;;) {
        int n = rdma_recv(ctx, 0, b, sizeof(b));
        if (n < 0) {
            fprintf(stderr, "echo client: %s\n", rdma_get_error());
            return 1;
        }
        if (n == 4 && memcmp(b, "bye", 4) == 0) {
            break;
        }
        if (rdma_send(ctx, 0, b, (size_t)n) != n) {
            fprintf(stderr, "echo client: %s\n", rdma_get_error());
            return 1;
        }
    }
    rdma_cleanup(ctx);
    return 0;
}

// echo_round sends "round r peer i" to peer idx and checks the echo.
static int echo_round(int idx, int round) {
    char msg[64], got[64];
    int len = snprintf(msg, sizeof(msg), "round %d peer %d", round, idx) + 1;
    if (rdma_send(rec_srv, idx, msg, (size_t)len) != len) {
        return -1;
    }
    int n = rdma_recv(rec_srv, idx, got, sizeof(got));
    if (n < 0) {
        return -1;
    }
    CHECK(n == len && memcmp(got, msg, (size_t)len) == 0, "peer %d round %d: echo '%.*s'", idx, round, n, got);
    return 0;
}

static void *recovery_server_thread(void *arg) {
    int idx = (int)(intptr_t)arg;
    pid_t child = idx == 0 ? rec_child : 0;
    for (int round = 0; round < RECOVERY_ROUNDS; round++) {
        if (idx == 0 && round == KILL_ROUND) {
            kill(child, SIGKILL);
            int status = 0;
            waitpid(child, &status, 0);
            CHECK(WIFSIGNALED(status), "the echo client was not killed: %#x", status);
            // The peer is gone: its calls fail with PEER_GONE, not the
            // context's other peers'.
            char b[64];
            EXPECT_ERRNO(rdma_recv(rec_srv, 0, b, sizeof(b)), RDMA_ERR_PEER_GONE, "recv from peer 0");
            EXPECT_ERRNO(rdma_send(rec_srv, 0, "x", 1), RDMA_ERR_PEER_GONE,
                         "send to peer 0: peer gone");
            EXPECT_ERRNO(rdma_accept_peer_at(rec_srv, 1), RDMA_ERR_PEER_CONNECTED, "accept at peer 1: peer index in use");
            pthread_mutex_lock(&accept_lock);
            child = start_echo_client();
            EXPECT_OK(rdma_accept_peer_at(rec_srv, 0), 0);
            pthread_mutex_unlock(&accept_lock);
        }
        if (idx == 2 && round == DROP_ROUND) {
            pthread_mutex_lock(&accept_lock);
            EXPECT_OK(rdma_send(rec_srv, 2, "drop", 5), 5);
            EXPECT_OK(rdma_disconnect_peer(rec_srv, 2), 0);
            EXPECT_ERRNO(rdma_send(rec_srv, 2, "x", 1), RDMA_ERR_DISCONNECTED, "send to peer 2: peer disconnected");
            EXPECT_OK(rdma_accept_peer_at(rec_srv, 2), 2);
            pthread_mutex_unlock(&accept_lock);
        }
        CHECK(echo_round(idx, round) == 0, "peer %d round %d: %s (errno %d)", idx, round, rdma_get_error(), rdma_get_errno());
    }
    EXPECT_OK(rdma_send(rec_srv, idx, "bye", 4), 4);
    if (child) {
        int status = 0;
        waitpid(child, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the replacement echo client: %#x", status);
    }
    return NULL;
}

static void *recovery_client_thread(void *arg) {
    const char *ip = arg;
    rdma_context *ctx = rdma_init(ip, 0, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client init: %s", rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    EXPECT_OK(rdma_connect_peer(ctx, "127.0.0.1", rec_port), 0);
    char b[64];
    for (;;) {
        int n = rdma_recv(ctx, 0, b, sizeof(b));
        if (n < 0) {
            CHECK(0, "client %s: %s", ip, rdma_get_error());
            break;
        }
        if (n == 4 && memcmp(b, "bye", 4) == 0) {
            break;
        }
        if (n == 5 && memcmp(b, "drop", 5) == 0) {
            // The server drops us: the next call finds it gone.
            EXPECT_ERRNO(rdma_recv(ctx, 0, b, sizeof(b)), RDMA_ERR_PEER_GONE, "recv from peer 0: ");
            EXPECT_ERRNO(rdma_reconnect_peer(ctx, 1, "127.0.0.1", rec_port), RDMA_ERR_NO_SUCH_PEER, "no such peer");
            EXPECT_OK(rdma_reconnect_peer(ctx, 0, "127.0.0.1", rec_port), 0);
            EXPECT_ERRNO(rdma_reconnect_peer(ctx, 0, "127.0.0.1", rec_port), RDMA_ERR_PEER_CONNECTED,
                         "the peer is connected");
            continue;
        }
        EXPECT_OK(rdma_send(ctx, 0, b, (size_t)n), n);
    }
    rdma_cleanup(ctx);
    return NULL;
}

static void test_recovery(void) {
    rec_srv = new_server(BUFFER_SIZE);
    rec_port = test_port - 1;
    pthread_t clients[2], servers[3];
    // Peer 0 is the echo process: accept it first, so that the pthread
    // clients are peers 1 and 2.
    rec_child = start_echo_client();
    EXPECT_OK(rdma_accept_peer(rec_srv), 0);
    pthread_create(&servers[0], NULL, recovery_server_thread, (void *)(intptr_t)0);
    const char *ips[2] = {"127.0.0.2", "127.0.0.3"};
    for (int i = 0; i < 2; i++) {
        pthread_create(&clients[i], NULL, recovery_client_thread, (void *)ips[i]);
        EXPECT_OK(rdma_accept_peer(rec_srv), i + 1);
    }
    for (int i = 1; i < 3; i++) {
        pthread_create(&servers[i], NULL, recovery_server_thread, (void *)(intptr_t)i);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(servers[i], NULL);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(clients[i], NULL);
    }
    rdma_cleanup(rec_srv);
}

// ---- collectives over n = 2..5 participants, each in a pthread ----------

#define COLL_COUNT 37
static int coll_port;
static int coll_n;

// value is rank's element i: small integers, so that every sum and product
// is exact in every type and the serial reference is the right answer.
static double value(int rank, int i) {
    return (double)((rank + 1) * ((i % 3) + 1) - (i % 5 == 0 ? 7 : 0));
}

static double combine(double a, double b, int op) {
    switch (op) {
    case RDMA_SUM:
        return a + b;
    case RDMA_PROD:
        return a * b;
    case RDMA_MIN:
        return a < b ? a : b;
    default:
        return a > b ? a : b;
    }
}

static size_t type_size(int type) {
    return type == RDMA_INT32 || type == RDMA_FLOAT ? 4 : 8;
}

static void put(void *buf, int type, int i, double v) {
    switch (type) {
    case RDMA_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case RDMA_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case RDMA_FLOAT: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
    }
}

static double get(const void *buf, int type, int i) {
    switch (type) {
    case RDMA_INT32: return ((const int32_t *)buf)[i];
    case RDMA_INT64: return (double)((const int64_t *)buf)[i];
    case RDMA_FLOAT: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

static void check_reduced(const char *what, int rank, const void *got, int type, int op) {
    for (int i = 0; i < COLL_COUNT; i++) {
        double want = value(0, i);
        for (int r = 1; r < coll_n; r++) {
            want = combine(want, value(r, i), op);
        }
        CHECK(get(got, type, i) == want, "%s n=%d rank %d type %d op %d element %d: %g, want %g",
              what, coll_n, rank, type, op, i, get(got, type, i), want);
    }
}

static void run_collectives(rdma_context *ctx) {
    int rank = rdma_group_init(ctx);
    CHECK(rank >= 0, "group init: %s", rdma_get_error());
    if (rank < 0) {
        return;
    }
    EXPECT_OK(rdma_group_size(ctx), coll_n);
    EXPECT_OK(rdma_barrier(ctx), 0);

    unsigned char b[100];
    for (int root = 0; root < coll_n; root++) {
        if (rank == root) {
            fill(b, sizeof(b), (unsigned)root);
        } else {
            memset(b, 0, sizeof(b));
        }
        EXPECT_OK(rdma_bcast(ctx, b, sizeof(b), root), 0);
        unsigned char want[100];
        fill(want, sizeof(want), (unsigned)root);
        CHECK(memcmp(b, want, sizeof(b)) == 0, "bcast n=%d from %d at rank %d differs", coll_n, root, rank);
    }

    unsigned char mine[8], all[5 * 8];
    fill(mine, sizeof(mine), (unsigned)(100 + rank));
    EXPECT_OK(rdma_allgather(ctx, mine, sizeof(mine), all, sizeof(all)), 0);
    for (int r = 0; r < coll_n; r++) {
        unsigned char want[8];
        fill(want, sizeof(want), (unsigned)(100 + r));
        CHECK(memcmp(all + r * 8, want, 8) == 0, "allgather n=%d rank %d block %d differs", coll_n, rank, r);
    }
    EXPECT_ERRNO(rdma_allgather(ctx, mine, sizeof(mine), all, (size_t)coll_n * 8 - 1), RDMA_ERR_MSG_SIZE, "is less than");

    static const int types[] = {RDMA_INT32, RDMA_INT64, RDMA_FLOAT, RDMA_DOUBLE};
    static const int ops[] = {RDMA_SUM, RDMA_PROD, RDMA_MIN, RDMA_MAX};
    double send[COLL_COUNT], recv[COLL_COUNT]; // room for 8-byte elements
    for (int t = 0; t < 4; t++) {
        for (int o = 0; o < 4; o++) {
            for (int i = 0; i < COLL_COUNT; i++) {
                put(send, types[t], i, value(rank, i));
            }
            memset(recv, 0, sizeof(recv));
            EXPECT_OK(rdma_allreduce(ctx, send, recv, COLL_COUNT, types[t], ops[o]), 0);
            check_reduced("allreduce", rank, recv, types[t], ops[o]);
            // In place, and a reduce to the last rank (NULL recv_buf
            // elsewhere).
            EXPECT_OK(rdma_allreduce(ctx, send, send, COLL_COUNT, types[t], ops[o]), 0);
            check_reduced("allreduce in place", rank, send, types[t], ops[o]);
            for (int i = 0; i < COLL_COUNT; i++) {
                put(send, types[t], i, value(rank, i));
            }
            int root = coll_n - 1;
            EXPECT_OK(rdma_reduce(ctx, send, rank == root ? recv : NULL, COLL_COUNT, types[t], ops[o], root), 0);
            if (rank == root) {
                check_reduced("reduce", rank, recv, types[t], ops[o]);
            }
        }
    }
    (void)type_size;
    EXPECT_ERRNO(rdma_allreduce(ctx, send, recv, COLL_COUNT, 9, RDMA_SUM), RDMA_ERR_INVALID, "datatype 9 is not");
    EXPECT_ERRNO(rdma_allreduce(ctx, send, recv, COLL_COUNT, RDMA_INT32, 0), RDMA_ERR_INVALID, "op 0 is not");
    EXPECT_OK(rdma_barrier(ctx), 0);
}

static void *coll_client(void *arg) {
    const char *ip = arg;
    rdma_context *ctx = rdma_init(ip, 0, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client init: %s", rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    EXPECT_OK(rdma_connect_peer(ctx, "127.0.0.1", coll_port), 0);
    run_collectives(ctx);
    rdma_cleanup(ctx);
    return NULL;
}

static void test_collectives(void) {
    static const char *ips[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
    rdma_context *lone = rdma_init("127.0.0.2", 0, 64, false);
    EXPECT_ERRNO(rdma_barrier(lone), RDMA_ERR_NO_GROUP, "no group: call GroupInit first");
    EXPECT_ERRNO(rdma_group_size(lone), RDMA_ERR_NO_GROUP, "no group");
    rdma_cleanup(lone);
    for (coll_n = 2; coll_n <= 5; coll_n++) {
        rdma_context *srv = new_server(BUFFER_SIZE);
        coll_port = test_port - 1;
        pthread_t t[4];
        for (int i = 0; i < coll_n - 1; i++) {
            pthread_create(&t[i], NULL, coll_client, (void *)ips[i]);
            EXPECT_OK(rdma_accept_peer(srv), i);
        }
        run_collectives(srv);
        for (int i = 0; i < coll_n - 1; i++) {
            pthread_join(t[i], NULL);
        }
        rdma_cleanup(srv);
    }
}

// ---- asynchronous requests ----------------------------------------------

#define ASYNC_EACH 3
#define ASYNC_MANY 50
static int async_port;
static pthread_barrier_t async_barrier; // server + 2 clients

static void *async_client(void *arg) {
    int id = (int)(intptr_t)arg; // 0 or 1: the server's peer index
    const char *ip = id == 0 ? "127.0.0.2" : "127.0.0.3";
    rdma_context *ctx = rdma_init(ip, 0, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client init: %s", rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    EXPECT_OK(rdma_connect_peer(ctx, "127.0.0.1", async_port), 0);
    pthread_barrier_wait(&async_barrier); // both connected, receives posted
    if (id == 0) {
        pthread_barrier_wait(&async_barrier); // client 1 has sent
    }
    char msgs[ASYNC_EACH][32];
    rdma_request *reqs[ASYNC_EACH];
    for (int k = 0; k < ASYNC_EACH; k++) {
        int len = snprintf(msgs[k], sizeof(msgs[k]), "peer %d message %d", id, k) + 1;
        EXPECT_OK(rdma_isend(ctx, 0, msgs[k], (size_t)len, &reqs[k]), 0);
    }
    for (int k = 0; k < ASYNC_EACH; k++) {
        EXPECT_OK(rdma_wait(reqs[k]), (int)strlen(msgs[k]) + 1);
    }
    if (id == 1) {
        pthread_barrier_wait(&async_barrier);
    }
    // Many in flight, completed with rdma_test.
    static char many[2][ASYNC_MANY][16];
    rdma_request *m[ASYNC_MANY];
    for (int k = 0; k < ASYNC_MANY; k++) {
        snprintf(many[id][k], sizeof(many[id][k]), "%d:%d", id, k);
        EXPECT_OK(rdma_isend(ctx, 0, many[id][k], sizeof(many[id][k]), &m[k]), 0);
    }
    for (int k = 0; k < ASYNC_MANY; k++) {
        int done = 0, ret = 0;
        while (!done) {
            ret = rdma_test(m[k], &done);
        }
        EXPECT_OK(ret, 16);
    }
    pthread_barrier_wait(&async_barrier); // the server is done
    rdma_cleanup(ctx);
    return NULL;
}

static void test_async(void) {
    rdma_context *srv = new_server(BUFFER_SIZE);
    async_port = test_port - 1;
    pthread_barrier_init(&async_barrier, NULL, 3);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        pthread_create(&t[i], NULL, async_client, (void *)(intptr_t)i);
        EXPECT_OK(rdma_accept_peer(srv), i);
    }
    // Receives on peer 0 are posted first; peer 1's messages come first,
    // and its requests complete first.
    char bufs[2 * ASYNC_EACH][64];
    rdma_request *reqs[2 * ASYNC_EACH];
    for (int k = 0; k < 2 * ASYNC_EACH; k++) {
        EXPECT_OK(rdma_irecv(srv, k / ASYNC_EACH, bufs[k], sizeof(bufs[k]), &reqs[k]), 0);
    }
    int done = 1;
    EXPECT_OK(rdma_test(reqs[0], &done), 0);
    CHECK(done == 0, "a receive completed before anything was sent");
    pthread_barrier_wait(&async_barrier);
    for (int got = 0; got < 2 * ASYNC_EACH; got++) {
        if (got == ASYNC_EACH) {
            pthread_barrier_wait(&async_barrier); // now peer 0 sends
        }
        int index = -1;
        int n = rdma_waitany(reqs, 2 * ASYNC_EACH, &index);
        CHECK(n > 0, "waitany: %s", rdma_get_error());
        CHECK(index >= 0 && reqs[index] == NULL, "waitany index %d", index);
        int peer = got < ASYNC_EACH ? 1 : 0;
        CHECK(index / ASYNC_EACH == peer, "completion %d is request %d, want one of peer %d's", got, index, peer);
        char want[32];
        snprintf(want, sizeof(want), "peer %d message %d", index / ASYNC_EACH, index % ASYNC_EACH);
        CHECK(index >= 0 && strcmp(bufs[index], want) == 0, "request %d got '%s', want '%s'", index, index >= 0 ? bufs[index] : "", want);
    }
    int index = 7;
    EXPECT_ERRNO(rdma_waitany(reqs, 2 * ASYNC_EACH, &index), RDMA_ERR_INVALID, "every entry of reqs is NULL");

    // 2*ASYNC_MANY messages in flight from the two clients, received with
    // requests posted all at once, in order per peer.
    static char many[2][ASYNC_MANY][16];
    rdma_request *m[2][ASYNC_MANY];
    for (int k = 0; k < ASYNC_MANY; k++) {
        for (int p = 0; p < 2; p++) {
            EXPECT_OK(rdma_irecv(srv, p, many[p][k], sizeof(many[p][k]), &m[p][k]), 0);
        }
    }
    for (int k = 0; k < ASYNC_MANY; k++) {
        for (int p = 0; p < 2; p++) {
            EXPECT_OK(rdma_wait(m[p][k]), 16);
            char want[16];
            snprintf(want, sizeof(want), "%d:%d", p, k);
            CHECK(strcmp(many[p][k], want) == 0, "message %d of peer %d is '%s'", k, p, many[p][k]);
        }
    }
    // Errors: a released or made-up request, a NULL out parameter.
    EXPECT_ERRNO(rdma_wait(m[0][0]), RDMA_ERR_BAD_REQUEST, "not a pending rdma_request");
    EXPECT_ERRNO(rdma_wait((rdma_request *)(uintptr_t)0x5eed), RDMA_ERR_BAD_REQUEST, "not a pending rdma_request");
    EXPECT_ERRNO(rdma_isend(srv, 0, "x", 1, NULL), RDMA_ERR_INVALID, "req is NULL");

    // Cleanup cancels what is pending, while the clients are still there;
    // the requests still report it.
    rdma_request *pending[3];
    char b[3][8];
    for (int k = 0; k < 3; k++) {
        EXPECT_OK(rdma_irecv(srv, 0, b[k], sizeof(b[k]), &pending[k]), 0);
    }
    rdma_cleanup(srv);
    for (int k = 0; k < 3; k++) {
        EXPECT_ERRNO(rdma_wait(pending[k]), RDMA_ERR_CANCELED, "cancelled: the context was closed");
    }
    pthread_barrier_wait(&async_barrier); // now the clients may go
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_barrier_destroy(&async_barrier);
}

// ---- one-sided write and read --------------------------------------------

#define OS_CLIENTS 3
#define OS_SIZE 65536
static int os_port;
static pthread_barrier_t os_barrier; // OS_CLIENTS clients + OS_CLIENTS server threads
static rdma_context *os_srv;
static rdma_mem *os_region[OS_CLIENTS]; // exposed read/write to client i
static rdma_mem *os_ro;                 // exposed read-only to every client
static rdma_desc os_rw[OS_CLIENTS];     // the read/write exposures

static unsigned char os_byte(int who, size_t i) { return (unsigned char)(who * 31 + i * 13 + (i >> 8)); }

static void *os_client(void *arg) {
    int id = (int)(intptr_t)arg;
    char ip[24];
    snprintf(ip, sizeof(ip), "127.0.0.%d", 2 + id);
    rdma_context *ctx = rdma_init(ip, 0, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client init: %s", rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    EXPECT_OK(rdma_connect_peer(ctx, "127.0.0.1", os_port), 0);
    rdma_desc rw, ro;
    EXPECT_OK(rdma_recv(ctx, 0, &rw, sizeof(rw)), (int)sizeof(rw));
    EXPECT_OK(rdma_recv(ctx, 0, &ro, sizeof(ro)), (int)sizeof(ro));

    rdma_mem *local = rdma_alloc(ctx, OS_SIZE);
    CHECK(local != NULL, "alloc: %s", rdma_get_error());
    CHECK(rdma_mem_size(local) == OS_SIZE, "mem size %zu", rdma_mem_size(local));
    unsigned char *p = rdma_mem_ptr(local);
    for (size_t i = 0; i < OS_SIZE; i++) {
        p[i] = os_byte(id, i);
    }
    // Half with a plain write, the other half with a notifying one.
    EXPECT_OK(rdma_write(ctx, 0, &rw, 0, local, 0, OS_SIZE / 2), OS_SIZE / 2);
    EXPECT_OK(rdma_write_notify(ctx, 0, &rw, OS_SIZE / 2, local, OS_SIZE / 2, OS_SIZE / 2, (unsigned)(id * 1000 + 1)), OS_SIZE / 2);
    char ok[8] = {0};
    EXPECT_OK(rdma_recv(ctx, 0, ok, sizeof(ok)), 3); // the server checked it

    // Read back the read-only region, then the own one in eight requests
    // in flight at once.
    memset(p, 0, OS_SIZE);
    EXPECT_OK(rdma_read(ctx, 0, &ro, 100, local, 0, 4000), 4000);
    for (size_t i = 0; i < 4000; i++) {
        if (p[i] != os_byte(99, 100 + i)) {
            CHECK(0, "client %d: read-only byte %zu is %d", id, i, p[i]);
            break;
        }
    }
    rdma_request *reqs[8];
    for (int k = 0; k < 8; k++) {
        EXPECT_OK(rdma_iread(ctx, 0, &rw, (size_t)k * (OS_SIZE / 8), local, (size_t)k * (OS_SIZE / 8), OS_SIZE / 8, &reqs[k]), 0);
    }
    for (int done = 0; done < 8; done++) {
        int index = -1;
        EXPECT_OK(rdma_waitany(reqs, 8, &index), OS_SIZE / 8);
    }
    for (size_t i = 0; i < OS_SIZE; i++) {
        if (p[i] != os_byte(id, i)) {
            CHECK(0, "client %d: read back byte %zu is %d, want %d", id, i, p[i], os_byte(id, i));
            break;
        }
    }
    rdma_request *w;
    EXPECT_OK(rdma_iwrite(ctx, 0, &rw, 0, local, 0, 64, &w), 0);
    EXPECT_OK(rdma_wait(w), 64);
    EXPECT_OK(rdma_write(ctx, 0, &rw, 0, NULL, 0, 0), 0); // zero bytes, no memory needed

    // Mistakes fail locally and break nothing.
    EXPECT_ERRNO(rdma_write(ctx, 0, &ro, 0, local, 0, 8), RDMA_ERR_BAD_DESC, "exposed for read, not write");
    EXPECT_ERRNO(rdma_read(ctx, 0, &rw, OS_SIZE - 8, local, 0, 16), RDMA_ERR_BAD_DESC, "exceed the region's");
    EXPECT_ERRNO(rdma_read(ctx, 0, &rw, 0, local, OS_SIZE - 8, 16), RDMA_ERR_INVALID, "exceed the");
    EXPECT_ERRNO(rdma_read(ctx, 0, NULL, 0, local, 0, 16), RDMA_ERR_INVALID, "desc is NULL");
    EXPECT_ERRNO(rdma_read(ctx, 0, &rw, 0, NULL, 0, 16), RDMA_ERR_BAD_MEM, "mem is NULL");
    EXPECT_ERRNO(rdma_read(ctx, 0, &rw, 0, (rdma_mem *)(uintptr_t)0x5eed, 0, 16), RDMA_ERR_BAD_MEM, "not a live rdma_mem");
    EXPECT_ERRNO(rdma_write_notify(ctx, 0, &rw, 0, local, 0, 8, RDMA_NOTIFY_MAX + 1u), RDMA_ERR_INVALID, "notification value");
    rdma_desc junk;
    memset(&junk, 0x41, sizeof(junk));
    EXPECT_ERRNO(rdma_write(ctx, 0, &junk, 0, local, 0, 8), RDMA_ERR_BAD_DESC, "bad magic");
    EXPECT_ERRNO(rdma_unexpose(ctx, &rw), RDMA_ERR_BAD_DESC, "not a live exposure of this context");
    EXPECT_ERRNO(rdma_write(ctx, 3, &rw, 0, local, 0, 8), RDMA_ERR_NO_SUCH_PEER, "no such peer");
    EXPECT_OK(rdma_read(ctx, 0, &rw, 0, local, 0, 8), 8);
    pthread_barrier_wait(&os_barrier); // A: the honest part is over

    if (id == OS_CLIENTS - 1) {
        // The attacker: another rkey in a well-formed descriptor. The
        // server's device refuses it; the connection breaks.
        rw.bytes[24] ^= 0x5a;
        rw.bytes[25] ^= 0xa5;
        EXPECT_ERRNO(rdma_write(ctx, 0, &rw, 0, local, 0, 64), RDMA_ERR_REMOTE_ACCESS, "refused the access");
        EXPECT_ERRNO(rdma_send(ctx, 0, "x", 1), RDMA_ERR_PEER_GONE, "peer gone");
    }
    pthread_barrier_wait(&os_barrier); // B: the attack is over
    if (id != OS_CLIENTS - 1) {
        EXPECT_OK(rdma_send(ctx, 0, "still", 6), 6);
    }
    pthread_barrier_wait(&os_barrier); // C: the server has checked
    EXPECT_OK(rdma_free(local), 0);
    EXPECT_ERRNO(rdma_free(local), RDMA_ERR_BAD_MEM, "not a live rdma_mem");
    EXPECT_ERROR(rdma_mem_ptr(local), NULL, "not a live rdma_mem");
    CHECK(rdma_get_errno() == RDMA_ERR_BAD_MEM, "errno %d", rdma_get_errno());
    rdma_cleanup(ctx);
    return NULL;
}

static void *os_server_peer(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned int value = 0;
    EXPECT_OK(rdma_wait_notify(os_srv, id, &value, 10000), OS_SIZE / 2);
    CHECK(value == (unsigned)(id * 1000 + 1), "peer %d: notification value %u", id, value);
    const unsigned char *p = rdma_mem_ptr(os_region[id]);
    for (size_t i = 0; i < OS_SIZE; i++) {
        if (p[i] != os_byte(id, i)) {
            CHECK(0, "peer %d: byte %zu is %d, want %d", id, i, p[i], os_byte(id, i));
            break;
        }
    }
    EXPECT_OK(rdma_send(os_srv, id, "ok", 3), 3);
    pthread_barrier_wait(&os_barrier); // A
    if (id == OS_CLIENTS - 1) {
        // The attacked side: its connection to the attacker is broken.
        EXPECT_ERRNO(rdma_wait_notify(os_srv, id, &value, 10000), RDMA_ERR_PEER_GONE, "peer gone");
        const unsigned char *q = rdma_mem_ptr(os_region[id]);
        CHECK(q[0] == os_byte(id, 0), "the refused write landed");
    }
    pthread_barrier_wait(&os_barrier); // B
    if (id != OS_CLIENTS - 1) {
        char buf[8];
        EXPECT_OK(rdma_recv(os_srv, id, buf, sizeof(buf)), 6);
        EXPECT_ERRNO(rdma_wait_notify(os_srv, id, &value, 10), RDMA_ERR_TIMEOUT, "timed out");
    }
    pthread_barrier_wait(&os_barrier); // C
    return NULL;
}

static void test_onesided(void) {
    os_srv = new_server(BUFFER_SIZE);
    os_port = test_port - 1;
    pthread_barrier_init(&os_barrier, NULL, 2 * OS_CLIENTS);
    EXPECT_ERROR(rdma_alloc(os_srv, 0), NULL, "size 0");
    CHECK(rdma_get_errno() == RDMA_ERR_INVALID, "errno %d", rdma_get_errno());
    EXPECT_ERROR(rdma_alloc(NULL, 64), NULL, "ctx is NULL");
    CHECK(rdma_get_errno() == RDMA_ERR_BAD_CONTEXT, "errno %d", rdma_get_errno());
    EXPECT_OK(rdma_free(NULL), 0);
    os_ro = rdma_alloc(os_srv, 8192);
    CHECK(os_ro != NULL, "alloc: %s", rdma_get_error());
    unsigned char *ro = rdma_mem_ptr(os_ro);
    for (size_t i = 0; i < 8192; i++) {
        ro[i] = os_byte(99, i);
    }
    pthread_t clients[OS_CLIENTS], servers[OS_CLIENTS];
    for (int i = 0; i < OS_CLIENTS; i++) {
        pthread_create(&clients[i], NULL, os_client, (void *)(intptr_t)i);
        EXPECT_OK(rdma_accept_peer(os_srv), i);
    }
    for (int i = 0; i < OS_CLIENTS; i++) {
        os_region[i] = rdma_alloc(os_srv, OS_SIZE);
        CHECK(os_region[i] != NULL, "alloc: %s", rdma_get_error());
        rdma_desc rw, rod;
        EXPECT_ERRNO(rdma_expose(os_srv, i, os_region[i], 1, OS_SIZE, RDMA_ACCESS_WRITE, &rw), RDMA_ERR_INVALID, "exceed");
        EXPECT_ERRNO(rdma_expose(os_srv, i, os_region[i], 0, OS_SIZE, 4, &rw), RDMA_ERR_INVALID, "access 4");
        EXPECT_OK(rdma_expose(os_srv, i, os_region[i], 0, OS_SIZE, RDMA_ACCESS_READ | RDMA_ACCESS_WRITE, &rw), 0);
        EXPECT_OK(rdma_expose(os_srv, i, os_ro, 0, 8192, RDMA_ACCESS_READ, &rod), 0);
        EXPECT_OK(rdma_send(os_srv, i, &rw, sizeof(rw)), (int)sizeof(rw));
        os_rw[i] = rw;
        EXPECT_OK(rdma_send(os_srv, i, &rod, sizeof(rod)), (int)sizeof(rod));
        pthread_create(&servers[i], NULL, os_server_peer, (void *)(intptr_t)i);
    }
    for (int i = 0; i < OS_CLIENTS; i++) {
        pthread_join(clients[i], NULL);
        pthread_join(servers[i], NULL);
    }
    EXPECT_OK(rdma_unexpose(os_srv, &os_rw[0]), 0);
    EXPECT_ERRNO(rdma_unexpose(os_srv, &os_rw[0]), RDMA_ERR_BAD_DESC, "not a live exposure of this context");
    EXPECT_ERRNO(rdma_unexpose(os_srv, NULL), RDMA_ERR_INVALID, "desc is NULL");
    EXPECT_OK(rdma_free(os_region[0]), 0);
    rdma_cleanup(os_srv); // frees the rest
    EXPECT_OK(rdma_free(os_region[1]), 0); // releases only the handle
    pthread_barrier_destroy(&os_barrier);
}

// ---- a peer that never takes its notifications -----------------------------

// The exposing side (the server) never calls rdma_wait_notify until told:
// the writer's notifications use up its credits, and then
// rdma_write_notify_timeout fails with RDMA_ERR_TIMEOUT after its timeout,
// a blocking rdma_write_notify waits, and rdma_free of the memory it uses
// fails at once with RDMA_ERR_BUSY, its handle still valid; once the server
// takes the notifications, the blocked write returns and rdma_free of the
// same handle frees it.
static int fb_port;
static pthread_barrier_t fb_barrier; // client + server
static int fb_sent;                  // notifications the writer got through
static int fb_blocked_done;          // the blocked write has returned
static rdma_mem *fb_local;
static rdma_context *fb_cli;
static rdma_desc fb_desc;

static void *fb_blocked_write(void *arg) {
    (void)arg;
    EXPECT_OK(rdma_write_notify(fb_cli, 0, &fb_desc, 0, fb_local, 0, 8, 7), 8);
    __atomic_store_n(&fb_blocked_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static double fb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *fb_client(void *arg) {
    (void)arg;
    fb_cli = rdma_init("127.0.0.7", 0, BUFFER_SIZE, false);
    CHECK(fb_cli != NULL, "client init: %s", rdma_get_error());
    if (!fb_cli) {
        exit(1);
    }
    EXPECT_OK(rdma_connect_peer(fb_cli, "127.0.0.1", fb_port), 0);
    EXPECT_OK(rdma_recv(fb_cli, 0, &fb_desc, sizeof(fb_desc)), (int)sizeof(fb_desc));
    fb_local = rdma_alloc(fb_cli, 4096);
    CHECK(fb_local != NULL, "alloc: %s", rdma_get_error());
    // Notify until the credits run out: the one that finds none times out.
    int rc = 0;
    for (int k = 0; k < 1000; k++) {
        double t0 = fb_now();
        rc = rdma_write_notify_timeout(fb_cli, 0, &fb_desc, 0, fb_local, 0, 8, 1, 200);
        if (rc != 8) {
            double took = fb_now() - t0;
            CHECK(took >= 0.15 && took < 5, "the timed-out notify took %.3f s", took);
            break;
        }
        fb_sent++;
    }
    EXPECT_ERRNO(rc, RDMA_ERR_TIMEOUT, "timed out");
    CHECK(fb_sent > 0 && fb_sent <= 128, "%d notifications before the credits ran out", fb_sent);
    EXPECT_ERRNO(rdma_write_notify_timeout(fb_cli, 0, &fb_desc, 0, fb_local, 0, 8, 1, 0), RDMA_ERR_TIMEOUT, "timed out");
    // A write without a notification needs no credit: it goes.
    EXPECT_OK(rdma_write_timeout(fb_cli, 0, &fb_desc, 0, fb_local, 0, 8, 1000), 8);
    EXPECT_OK(rdma_read_timeout(fb_cli, 0, &fb_desc, 0, fb_local, 0, 8, 1000), 8);

    // A blocking notify waits for a credit, holding fb_local.
    pthread_t blocked;
    pthread_create(&blocked, NULL, fb_blocked_write, NULL);
    usleep(300 * 1000);
    CHECK(!__atomic_load_n(&fb_blocked_done, __ATOMIC_SEQ_CST), "the notify without a credit returned");
    double t0 = fb_now();
    EXPECT_ERRNO(rdma_free(fb_local), RDMA_ERR_BUSY, "in use");
    CHECK(fb_now() - t0 < 1, "rdma_free of busy memory took %.3f s", fb_now() - t0);
    // The handle is still valid, and so is the memory.
    CHECK(rdma_mem_ptr(fb_local) != NULL, "busy memory's handle: %s", rdma_get_error());
    CHECK(rdma_mem_size(fb_local) == 4096, "size %zu", rdma_mem_size(fb_local));
    ((unsigned char *)rdma_mem_ptr(fb_local))[0] = 1;
    pthread_barrier_wait(&fb_barrier); // A: the server may take the notifications now
    pthread_join(blocked, NULL);
    CHECK(__atomic_load_n(&fb_blocked_done, __ATOMIC_SEQ_CST), "the blocked notify returned");
    EXPECT_OK(rdma_free(fb_local), 0); // freed once nothing uses it
    EXPECT_ERRNO(rdma_free(fb_local), RDMA_ERR_BAD_MEM, "not a live rdma_mem");
    pthread_barrier_wait(&fb_barrier); // B
    rdma_cleanup(fb_cli);
    return NULL;
}

static void test_free_busy(void) {
    rdma_context *srv = new_server(BUFFER_SIZE);
    fb_port = test_port - 1;
    pthread_barrier_init(&fb_barrier, NULL, 2);
    pthread_t cli;
    pthread_create(&cli, NULL, fb_client, NULL);
    EXPECT_OK(rdma_accept_peer(srv), 0);
    rdma_mem *region = rdma_alloc(srv, 4096);
    CHECK(region != NULL, "alloc: %s", rdma_get_error());
    rdma_desc d;
    EXPECT_OK(rdma_expose(srv, 0, region, 0, 4096, RDMA_ACCESS_READ | RDMA_ACCESS_WRITE, &d), 0);
    EXPECT_OK(rdma_send(srv, 0, &d, sizeof(d)), (int)sizeof(d));
    pthread_barrier_wait(&fb_barrier); // A
    unsigned int value = 0;
    for (int k = 0; k < fb_sent; k++) {
        EXPECT_OK(rdma_wait_notify(srv, 0, &value, 10000), 8);
    }
    EXPECT_OK(rdma_wait_notify(srv, 0, &value, 10000), 8);
    CHECK(value == 7, "the blocked notification's value is %u", value);
    pthread_barrier_wait(&fb_barrier); // B
    pthread_join(cli, NULL);
    EXPECT_OK(rdma_free(region), 0);
    rdma_cleanup(srv);
    pthread_barrier_destroy(&fb_barrier);
}

// ---- quality of service ------------------------------------------------

#define QOS_CLIENTS 3
static int qos_port;
static pthread_barrier_t qos_barrier; // server + clients

static void *qos_client(void *arg) {
    int id = (int)(intptr_t)arg;
    char ip[24];
    snprintf(ip, sizeof(ip), "127.0.0.%d", 2 + id);
    rdma_context *ctx = rdma_init(ip, 0, BUFFER_SIZE, false);
    CHECK(ctx != NULL, "client init: %s", rdma_get_error());
    if (!ctx) {
        exit(1);
    }
    int tos = (id + 1) << 5; // DSCP 8, 16, 24
    EXPECT_ERRNO(rdma_set_tos(ctx, 256), RDMA_ERR_INVALID, "256 is not in 0..255");
    EXPECT_ERRNO(rdma_set_tos(ctx, -1), RDMA_ERR_INVALID, "-1 is not in 0..255");
    EXPECT_OK(rdma_set_tos(ctx, tos), 0);
    EXPECT_OK(rdma_get_tos(ctx, -1), tos);
    EXPECT_OK(rdma_connect_peer(ctx, "127.0.0.1", qos_port), 0);
    EXPECT_OK(rdma_get_tos(ctx, 0), tos); // read back from the connection
    EXPECT_ERRNO(rdma_get_tos(ctx, 1), RDMA_ERR_NO_SUCH_PEER, "no such peer");
    EXPECT_OK(rdma_send(ctx, 0, "q", 2), 2);
    pthread_barrier_wait(&qos_barrier);
    rdma_cleanup(ctx);
    return NULL;
}

static void test_qos(void) {
    rdma_context *srv = new_server(BUFFER_SIZE);
    qos_port = test_port - 1;
    EXPECT_OK(rdma_get_tos(srv, -1), 0);
    EXPECT_OK(rdma_set_tos(srv, 0x28), 0);
    pthread_barrier_init(&qos_barrier, NULL, QOS_CLIENTS + 1);
    pthread_t t[QOS_CLIENTS];
    for (int i = 0; i < QOS_CLIENTS; i++) {
        pthread_create(&t[i], NULL, qos_client, (void *)(intptr_t)i);
    }
    for (int i = 0; i < QOS_CLIENTS; i++) {
        int idx = rdma_accept_peer(srv);
        EXPECT_NOERR(idx);
        EXPECT_OK(rdma_get_tos(srv, idx), 0x28);
        char b[4];
        EXPECT_OK(rdma_recv(srv, idx, b, sizeof(b)), 2);
    }
    EXPECT_ERRNO(rdma_get_tos(NULL, 0), RDMA_ERR_BAD_CONTEXT, "ctx is NULL");
    pthread_barrier_wait(&qos_barrier);
    for (int i = 0; i < QOS_CLIENTS; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_barrier_destroy(&qos_barrier);
    rdma_cleanup(srv);
}

// ---- MAX_PEERS ---------------------------------------------------------

static rdma_context *max_srv;

static void *accept_all(void *arg) {
    (void)arg;
    for (int i = 0; i < MAX_PEERS; i++) {
        EXPECT_OK(rdma_accept_peer(max_srv), i);
    }
    return NULL;
}

static void test_max_peers(void) {
    max_srv = new_server(64);
    int port = test_port - 1;
    rdma_context *cl = rdma_init("127.0.0.2", 0, 64, false);
    CHECK(cl != NULL, "client init: %s", rdma_get_error());
    pthread_t t;
    pthread_create(&t, NULL, accept_all, NULL);
    for (int i = 0; i < MAX_PEERS; i++) {
        EXPECT_OK(rdma_connect_peer(cl, "127.0.0.1", port), i);
    }
    pthread_join(t, NULL);
    EXPECT_ERROR(rdma_connect_peer(cl, "127.0.0.1", port), -1, "too many peers (MAX_PEERS is 64)");
    EXPECT_ERROR(rdma_accept_peer(max_srv), -1, "rdma_accept_peer: accept: too many peers (MAX_PEERS is 64)");
    // All 64 work: a broadcast reaches every one.
    EXPECT_OK(rdma_broadcast(max_srv, "hi", 3), 3);
    for (int i = 0; i < MAX_PEERS; i++) {
        char b[4];
        EXPECT_OK(rdma_recv(cl, i, b, sizeof(b)), 3);
    }
    rdma_cleanup(cl);
    rdma_cleanup(max_srv);
}

// ---- rdma_cleanup unblocks calls blocked in other threads --------------

static rdma_context *blocked_ctx;

// closed_or_gone: a call on a context being cleaned up fails as closed if
// it started first, or finds the context gone if it started after.
static int closed_or_gone(const char *err) {
    return strstr(err, "context closed") != NULL || strstr(err, "not a live rdma_context") != NULL;
}

static void *blocked_accept(void *arg) {
    (void)arg;
    int ret = rdma_accept_peer(blocked_ctx);
    CHECK(ret == -1 && closed_or_gone(rdma_get_error()), "accept returned %d: '%s'", ret, rdma_get_error());
    return NULL;
}

static void *blocked_recv(void *arg) {
    rdma_context *cl = arg;
    char b[8];
    int ret = rdma_recv(cl, 0, b, sizeof(b));
    CHECK(ret == -1 && closed_or_gone(rdma_get_error()), "recv returned %d: '%s'", ret, rdma_get_error());
    return NULL;
}

static void test_cleanup_unblocks(void) {
    blocked_ctx = new_server(64);
    int port = test_port - 1;
    rdma_context *cl = rdma_init("127.0.0.3", 0, 64, false);
    CHECK(cl != NULL, "client init: %s", rdma_get_error());
    EXPECT_OK(rdma_connect_peer(cl, "127.0.0.1", port), 0);
    EXPECT_OK(rdma_accept_peer(blocked_ctx), 0);
    pthread_t a, r;
    pthread_create(&a, NULL, blocked_accept, NULL);
    pthread_create(&r, NULL, blocked_recv, cl);
    usleep(100 * 1000); // most likely both block first; either way they fail cleanly
    rdma_cleanup(cl);
    rdma_cleanup(blocked_ctx);
    pthread_join(a, NULL);
    pthread_join(r, NULL);
}

// ---- the example programs, as separate processes ------------------------

// The examples talk to 127.0.0.1:5555; these tests run in a network
// namespace of their own where they can (see main), so nothing else on the
// host shares that port.

static void test_simple_client(const char *path) {
    rdma_context *srv = rdma_init("127.0.0.1", 5555, BUFFER_SIZE, true);
    CHECK(srv != NULL, "server on 127.0.0.1:5555: %s", rdma_get_error());
    if (!srv) {
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        execl(path, path, (char *)NULL);
        _exit(127);
    }
    EXPECT_OK(rdma_accept_peer(srv), 0);
    char b[64] = {0};
    EXPECT_OK(rdma_recv(srv, 0, b, sizeof(b)), 12);
    CHECK(strcmp(b, "Hello RDMA!") == 0, "simple client sent '%s'", b);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "simple client exit status %d", status);
    rdma_cleanup(srv);
}

// combined_reply receives the client's block of a round and answers with a
// combined message of n bytes: 64-byte NUL-padded blocks, as the original
// server sends them, the first one "Server Round <round>".
static void combined_reply(rdma_context *srv, size_t n, int round) {
    char block[MSG];
    EXPECT_OK(rdma_recv(srv, 0, block, sizeof(block)), MSG);
    char *msg = calloc(1, n);
    for (size_t off = 0; off + MSG <= n; off += MSG) {
        snprintf(msg + off, MSG, "Server Round %d block %zu", round, off / MSG);
    }
    EXPECT_OK(rdma_send(srv, 0, msg, n), n);
    free(msg);
}

// test_hostile_example plays a hostile server to examples/c/client.c, which
// asks for a 16384-byte buf_size and passes a malloc'd BUFFER_SIZE recv_buf:
// round 1 gets a combined message of exactly BUFFER_SIZE bytes, round 2 one
// of 16384. The client must take round 1, then fail cleanly with the
// library's error, and AddressSanitizer must see nothing.
static void test_hostile_example(const char *path) {
    rdma_context *srv = rdma_init("127.0.0.1", 5555, BUFFER_SIZE * 4, true);
    CHECK(srv != NULL, "server on 127.0.0.1:5555: %s", rdma_get_error());
    if (!srv) {
        return;
    }
    int out[2];
    if (pipe(out) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(out[1], 2);
        close(out[0]);
        close(out[1]);
        execl(path, path, "1", "127.0.0.2", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    EXPECT_OK(rdma_accept_peer(srv), 0);
    EXPECT_OK(rdma_send(srv, 0, "START", 6), 6);
    combined_reply(srv, BUFFER_SIZE, 1);
    combined_reply(srv, BUFFER_SIZE * 4, 2);

    static char log[1 << 16];
    size_t len = 0;
    for (ssize_t n; len < sizeof(log) - 1 && (n = read(out[0], log + len, sizeof(log) - 1 - len)) != 0;) {
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            break;
        }
        len += (size_t)n;
    }
    log[len] = '\0';
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "client exit status %#x; its output:\n%s", status, log);
    CHECK(strstr(log, "Received combined: 'Server Round 1 block 0'") != NULL, "round 1 missing; output:\n%s", log);
    CHECK(strstr(log, "Broadcast failed: rdma_sequential_alltoall: all-to-all: recv from peer 0: message too long: "
                      "the combined message of 16384 bytes (256 blocks of 64) does not fit in the receive buffer "
                      "of 4096 bytes") != NULL,
          "no clean failure in round 2; output:\n%s", log);
    CHECK(strstr(log, "AddressSanitizer") == NULL, "AddressSanitizer report:\n%s", log);
    rdma_cleanup(srv);
}

// test_program runs a self-contained example and checks its exit status
// and last line.
static void test_program(const char *path, const char *want) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s 2>&1", path);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL, "popen %s", path);
    if (!f) {
        return;
    }
    static char out[1 << 16];
    size_t len = fread(out, 1, sizeof(out) - 1, f);
    out[len] = '\0';
    int status = pclose(f);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: exit status %#x; output:\n%s", path, status, out);
    CHECK(strstr(out, want) != NULL, "%s: no '%s' in its output:\n%s", path, want, out);
    CHECK(strstr(out, "AddressSanitizer") == NULL, "%s: AddressSanitizer report:\n%s", path, out);
}

// bring_up_lo sets the loopback interface of a new network namespace up.
static int bring_up_lo(void) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    strcpy(ifr.ifr_name, "lo");
    int ret = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (ret == 0) {
        ifr.ifr_flags |= IFF_UP;
        ret = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    close(fd);
    return ret;
}

// test_examples runs "capi_test --examples simple_client client" in a new
// network namespace, or in this one (on port 5555 of the host) where the
// test may not make one.
static void test_examples(const char *simple_client, const char *client, const char *async, const char *onesided) {
    pid_t pid = fork();
    if (pid == 0) {
        // Only system calls between fork and exec: the child of a
        // multi-threaded process.
        if (unshare(CLONE_NEWNET) == 0) {
            if (bring_up_lo() != 0) {
                _exit(125);
            }
        } else {
            static const char note[] = "capi_test: no network namespace (not root?): using the host's 127.0.0.1:5555\n";
            (void)!write(2, note, sizeof(note) - 1);
        }
        execl("/proc/self/exe", "capi_test", "--examples", simple_client, client, async, onesided, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the examples' tests: exit status %#x", status);
}

static int report(const char *what) {
    if (failures) {
        printf("%s: FAILED %d of %d checks\n", what, failures, checks);
        return 1;
    }
    printf("%s: PASS (%d checks)\n", what, checks);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--echo-client") == 0) {
        return echo_client_main(atoi(argv[2]));
    }
    if (argc == 6 && strcmp(argv[1], "--examples") == 0) {
        printf("capi_test: simple client %s\n", argv[2]);
        test_simple_client(argv[2]);
        printf("capi_test: hostile server against %s\n", argv[3]);
        test_hostile_example(argv[3]);
        printf("capi_test: %s\n", argv[4]);
        test_program(argv[4], "async: OK, 16 messages");
        printf("capi_test: %s\n", argv[5]);
        test_program(argv[5], "onesided: OK, 65536 bytes written one-sided and checked");
        return report("capi_test --examples");
    }
    test_port = 20000 + (int)(getpid() % 20000);
    self_path = "/proc/self/exe";
    CHECK(rdma_get_error() != NULL && rdma_get_error()[0] == '\0', "initial error text '%s'", rdma_get_error());

    printf("capi_test: bad arguments\n");
    test_bad_arguments();
    printf("capi_test: per-thread errors\n");
    test_thread_local_errors();
    printf("capi_test: server and two clients\n");
    test_star();
    printf("capi_test: a server that sends more than recv_buf holds\n");
    test_hostile_server();
    printf("capi_test: a peer killed and replaced while the others go on\n");
    test_recovery();
    printf("capi_test: collectives, n = 2..5\n");
    test_collectives();
    printf("capi_test: asynchronous requests\n");
    test_async();
    printf("capi_test: one-sided write and read\n");
    test_onesided();
    printf("capi_test: rdma_free of busy memory, a blocked notify's timeout\n");
    test_free_busy();
    printf("capi_test: quality of service\n");
    test_qos();
    printf("capi_test: MAX_PEERS\n");
    test_max_peers();
    printf("capi_test: cleanup unblocks other threads\n");
    test_cleanup_unblocks();
    if (argc > 4) {
        test_examples(argv[1], argv[2], argv[3], argv[4]);
    }
    return report("capi_test");
}
